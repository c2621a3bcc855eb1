#!/bin/bash
# Asked for an H200, ran on an H100: the final build (.devbase/new) beside the build before (.devbase/base, _alt):
# 50 us kernels synchronizing after each, pair; the CuPy pair.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in base new; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
ALT_TARGET=$B/base TARGET=$B/new NAME=cell CELLS="50us:1" QUAD_CELLS="" TRANSFORMER="" \
  BUDGET=150 bench/share/sweep.sh $W > $W/cell.log 2>&1
ALT_TARGET=$B/base TARGET=$B/new NAME=cupy LOOP=cupy TF_STARTUP=8 CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt" BUDGET=100 bench/share/sweep.sh $W > $W/cupy.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r9.tgz -C $W .
