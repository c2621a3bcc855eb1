#!/bin/bash
# the build of call 5 (.devbase/new) on pairs of long kernels: 20 ms never synchronizing, 1.6 ms
# synchronizing every 4
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
TARGET=$N NAME=cells CELLS="20ms:0 1600us:4" QUAD_CELLS="" TRANSFORMER="" BUDGET=200 bench/share/sweep.sh $W > $W/cells.log 2>&1
tar czf $OUT/r6.tgz -C $W .
