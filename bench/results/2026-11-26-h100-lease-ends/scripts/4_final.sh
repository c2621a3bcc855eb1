#!/bin/bash
# The final build (.devbase/new: checks up to 32 launches apart, extensions asked ahead, waits
# for a grant spinning up to 100 ms, yielding) beside the build before (.devbase/base, the _alt
# phases): the transformer training loops' pair twice, alternating; the CuPy loops' pair and one
# alone; the 50 us kernels synchronizing after each, pair and four clients.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in base new; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
ALT_TARGET=$B/base TARGET=$B/new NAME=tf CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt gpushare_alt gpushare" BUDGET=180 bench/share/sweep.sh $W > $W/tf.log 2>&1
ALT_TARGET=$B/base TARGET=$B/new NAME=cupy LOOP=cupy TF_STARTUP=8 CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt gpushare_alone gpushare_alone_alt" BUDGET=130 bench/share/sweep.sh $W > $W/cupy.log 2>&1
ALT_TARGET=$B/base TARGET=$B/new NAME=cell CELLS="50us:1" QUAD_CELLS="50us:1" TRANSFORMER="" \
  BUDGET=200 bench/share/sweep.sh $W > $W/cell.log 2>&1
xz -T4 $W/*.gpushared.log; tar czf $OUT/r4.tgz -C $W .
