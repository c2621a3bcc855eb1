#!/bin/bash
# The 50 us kernels synchronizing after each again (two cells, then four clients),
# .devbase/new2 beside .devbase/prev (_alt).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in prev new2; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
ALT_TARGET=$B/prev TARGET=$B/new2 NAME=short CELLS="50us:1 50us:1" QUAD_CELLS="50us:1" TRANSFORMER="" \
  BUDGET=420 bench/share/sweep.sh $W > $W/short.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r5.tgz -C $W .
grep -h -v '^ *[]["{}0-9-]' $W/short.log | grep -v '^ *"' | tail -40
