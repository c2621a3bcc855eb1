#!/bin/bash
# Queue checks up to 32 launches apart and extensions asked a quarter lease ahead of a lease's end
# (.devbase/new) beside the build before (.devbase/base, the _alt phases). A CuPy loop alone
# without the hook (three solo phases among the others), with the hook and no daemon, alone under
# gpushared with each build twice (alternating), then the pair (0.75 / 0.25) with each build;
# then the 50 us kernels synchronizing after each: solo, the pair and alone with each build.
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/base/commit.txt $W/base_commit.txt
ALT_TARGET=$B/base TARGET=$N NAME=cupy LOOP=cupy TF_STARTUP=8 CELLS="" QUAD_CELLS="" \
  TRANSFORMER="hooked gpushare_alone gpushare_alone_alt solo gpushare_alone_alt gpushare_alone solo gpushare gpushare_alt" \
  BUDGET=300 bench/share/sweep.sh $W > $W/cupy.log 2>&1
ALT_TARGET=$B/base TARGET=$N NAME=cell CELLS="50us:1" ALONE_CELLS="50us:1" QUAD_CELLS="" TRANSFORMER="" \
  BUDGET=200 bench/share/sweep.sh $W > $W/cell.log 2>&1
xz -T4 $W/*.gpushared.log; tar czf $OUT/r1.tgz -C $W .
