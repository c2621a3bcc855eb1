#!/bin/bash
# The transformer training loop through torch.compile (TorchInductor's Triton kernels): alone,
# two under gpushare (0.75 / 0.25), two time-sliced, alone again, with the build in .devbase/head;
# each user's compile cache filled first.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" > $W/versions.txt 2>&1
LOOP=compiled TF_STARTUP=40 TARGET=$B/head NAME=compiled CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare timeslice solo" BUDGET=520 bench/share/sweep.sh $W > $W/compiled.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r2.tgz -C $W .
cat $W/versions.txt; grep -E "==|solo:|share|sum" $W/compiled.log; grep -h "stats" $W/compiled.stats.txt | head -8
grep -B2 -A3 -i "error" $W/compiled.log | head -20
