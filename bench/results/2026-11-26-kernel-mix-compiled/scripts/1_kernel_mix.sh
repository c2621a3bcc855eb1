#!/bin/bash
# Jobs whose queue mixes kernels of two sizes (share/sweep.sh ,big=K/N: every Nth kernel of time
# K), pairs 0.75 / 0.25 and one four-client cell, each solo phase run again after the shared ones,
# with the build in .devbase/head.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
SOLO_AGAIN=1 TARGET=$B/head NAME=mix CELLS="50us:1,big=20ms/200 200us:0,big=20ms/50 1600us:4,big=100ms/20" \
  QUAD_CELLS="200us:0,big=20ms/50" TRANSFORMER="" BUDGET=480 bench/share/sweep.sh $W > $W/mix.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r1.tgz -C $W .
grep -E "==|solo:|share|sum|shape" $W/mix.log
