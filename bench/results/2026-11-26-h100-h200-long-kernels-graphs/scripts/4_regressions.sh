#!/bin/bash
# Regressions of the fixes: 50 us kernels synchronizing after each, 1.6 ms and 20 ms kernels never
# synchronizing, .devbase/new2 beside .devbase/prev (_alt); then the CUDA-graph loop once more
# with the build before, for its error message.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in prev new2; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
ALT_TARGET=$B/prev TARGET=$B/new2 NAME=cells CELLS="50us:1 1600us:0 20ms:0" QUAD_CELLS="" TRANSFORMER="" \
  BUDGET=330 bench/share/sweep.sh $W > $W/cells.log 2>&1
ALT_TARGET=$B/prev TARGET=$B/new2 NAME=graphed_prev LOOP=graphed TF_STARTUP=20 CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare_alone_alt" BUDGET=100 bench/share/sweep.sh $W > $W/graphed_prev.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r4.tgz -C $W .
grep -h -v '^ *[]["{}0-9-]' $W/cells.log $W/graphed_prev.log | grep -v '^ *"' | tail -40
grep -h -o '"error": "[^"]*"' $W/graphed_prev.log | head -3
