#!/bin/bash
# The CUDA-graph loop and the 100 ms kernels again: the build with both fixes (.devbase/new2)
# beside the build before (.devbase/prev, the _alt phases).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in prev new2; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
ALT_TARGET=$B/prev TARGET=$B/new2 NAME=graphed LOOP=graphed TF_STARTUP=20 CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alone timeslice gpushare_alt solo" BUDGET=260 bench/share/sweep.sh $W > $W/graphed.log 2>&1
ALT_TARGET=$B/prev TARGET=$B/new2 NAME=long CELLS="100ms:0 100ms:1" QUAD_CELLS="" TRANSFORMER="" \
  BUDGET=260 bench/share/sweep.sh $W > $W/long.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r3.tgz -C $W .
grep -h -v "^ *[\"{}\[]" $W/graphed.log $W/long.log | grep -v "^ *]" | tail -40
