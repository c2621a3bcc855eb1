#!/bin/bash
# Regressions: the final build (.devbase/new) beside the build before (.devbase/base, _alt) on the
# long kernels (20 ms and 1.6 ms, never synchronizing) and the JAX transformer encoders' pair.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in base new; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
ALT_TARGET=$B/base TARGET=$B/new NAME=cell CELLS="20ms:0 1600us:0" QUAD_CELLS="" TRANSFORMER="" \
  BUDGET=200 bench/share/sweep.sh $W > $W/cell.log 2>&1
ALT_TARGET=$B/base TARGET=$B/new NAME=jax LOOP=jax TF_STARTUP=30 CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt" BUDGET=170 bench/share/sweep.sh $W > $W/jax.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r8.tgz -C $W .
