#!/bin/bash
# The share cells the demand estimate decides, .devbase/new against .devbase/cur (as _alt):
# pairs 0.75 / 0.25 of 50 us kernels synchronizing after each and of 1.6 ms kernels every 4,
# and four clients 0.4 / 0.3 / 0.2 / 0.1 of 50 us kernels.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in cur new; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
TARGET=$B/new ALT_TARGET=$B/cur NAME=cells CELLS="50us:1 1600us:4" QUAD_CELLS="50us:1" TRANSFORMER="" \
  BUDGET=520 bench/share/sweep.sh $W > $W/cells.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r7.tgz -C $W .
grep -E "==|solo:|share|sum" $W/cells.log
