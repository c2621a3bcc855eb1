#!/bin/bash
# Kernels of 100 ms (five default leases each), synchronizing after each and never; the CNN
# training step replayed as one CUDA graph (LOOP=graphed): pairs 0.75 / 0.25 under gpushared
# (.devbase/head), the graphed pair also time-sliced.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/head/commit.txt $W/head_commit.txt
TARGET=$B/head NAME=long CELLS="100ms:1 100ms:0" QUAD_CELLS="" TRANSFORMER="" \
  BUDGET=150 bench/share/sweep.sh $W > $W/long.log 2>&1
TARGET=$B/head NAME=graphed LOOP=graphed TF_STARTUP=20 CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare timeslice solo" BUDGET=200 bench/share/sweep.sh $W > $W/graphed.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r2.tgz -C $W .
grep -h -A3 "pair\|gpushare\|timeslice\|solo" $W/long.log $W/graphed.log | grep -v "^--" | tail -40
