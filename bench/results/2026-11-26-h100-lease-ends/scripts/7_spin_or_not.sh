#!/bin/bash
# Is it the spinning wait? The final build (.devbase/new) beside the same build whose waits for a
# grant block at once (.devbase/nospin: SPIN_LIMIT 0, the _alt phases): 50 us kernels
# synchronizing after each, the pair and four clients; the CuPy pair twice each, alternating; then
# the 50 us pair beside the build before (.devbase/base) again.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in base new nospin; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
ALT_TARGET=$B/nospin TARGET=$B/new NAME=cell CELLS="50us:1" QUAD_CELLS="50us:1" TRANSFORMER="" \
  BUDGET=220 bench/share/sweep.sh $W > $W/cell.log 2>&1
ALT_TARGET=$B/nospin TARGET=$B/new NAME=cupy LOOP=cupy TF_STARTUP=8 CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt gpushare_alt gpushare" BUDGET=140 bench/share/sweep.sh $W > $W/cupy.log 2>&1
ALT_TARGET=$B/base TARGET=$B/new NAME=cellbase CELLS="50us:1" QUAD_CELLS="" TRANSFORMER="" \
  BUDGET=100 bench/share/sweep.sh $W > $W/cellbase.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r7.tgz -C $W .
