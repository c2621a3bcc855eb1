#!/bin/bash
# The MPS row of bench/run.sh part 18: 4 matmul and 4 small-MLP loops under plain MPS and under
# gpushare with MPS, with the build in .devbase/head.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head
MODES="mps gpushare_mps_concurrent" COUNTS=4 timeout 300 bench/throughput/run.sh $W > $W/throughput.log 2>&1
python3 bench/report.py $W > /dev/null 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r4.tgz -C $W .
tail -8 $W/throughput.log; grep -A14 -i "throughput" $W/summary.md | head -30
