#!/bin/bash
# The four-client cell of 50 us kernels synchronizing after each, twice more, .devbase/new2 beside
# .devbase/prev (_alt).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in prev new2; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
for n in quad1 quad2; do
  ALT_TARGET=$B/prev TARGET=$B/new2 NAME=$n CELLS="" QUAD_CELLS="50us:1" TRANSFORMER="" \
    BUDGET=200 bench/share/sweep.sh $W > $W/$n.log 2>&1
done
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r6.tgz -C $W .
grep -h -v '^ *[]["{}0-9-]' $W/quad*.log | grep -v '^ *"' | tail -40
