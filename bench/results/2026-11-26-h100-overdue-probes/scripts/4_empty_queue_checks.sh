#!/bin/bash
# the hook's spaced checks of an empty queue (.devbase/new) beside the build before it
# (.devbase/base, the _alt phases): 50 us kernels alone under gpushared and in pairs
# (synchronizing after each, every 4), 200 us synchronizing after each, four clients of 50 us
# synchronizing after each
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/base/commit.txt $W/base_commit.txt
ALT_TARGET=$B/base TARGET=$N NAME=checks CELLS="50us:1 200us:1 50us:4" ALONE_CELLS="50us:1" QUAD_CELLS="50us:1" TRANSFORMER="" BUDGET=400 bench/share/sweep.sh $W > $W/checks.log 2>&1
tar czf $OUT/r4.tgz -C $W .
