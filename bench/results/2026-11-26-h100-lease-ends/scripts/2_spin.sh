#!/bin/bash
# A thread waiting for a grant spins (polls its socket) for up to 100 ms before it blocks
# (.devbase/spin) beside the same build blocking at once (.devbase/new, the _alt phases): pairs
# (0.75 / 0.25) of 50 us kernels synchronizing after each and of 1.6 ms kernels synchronizing
# every 4, of the CuPy loop (each build twice, alternating) and of the transformer training loop.
set -u
B=$PWD/.devbase; N=$B/spin; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/new/commit.txt $W/base_commit.txt
ALT_TARGET=$B/new TARGET=$N NAME=cell CELLS="50us:1 1600us:4" QUAD_CELLS="" TRANSFORMER="" \
  BUDGET=200 bench/share/sweep.sh $W > $W/cell.log 2>&1
ALT_TARGET=$B/new TARGET=$N NAME=cupy LOOP=cupy TF_STARTUP=8 CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt solo gpushare_alt gpushare" BUDGET=170 bench/share/sweep.sh $W > $W/cupy.log 2>&1
ALT_TARGET=$B/new TARGET=$N NAME=tf CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare gpushare_alt" \
  BUDGET=110 bench/share/sweep.sh $W > $W/tf.log 2>&1
xz -T4 $W/*.gpushared.log; tar czf $OUT/r2.tgz -C $W .
