#!/bin/bash
# The table at a glance, two GPUs: bench/run.sh part 13 with HEAD's build (.devbase/base), on a
# machine of two GPUs.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/base/commit.txt $W/commit.txt
TARGET=$B/base bench/run.sh $W 13 > $W/run.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r4.tgz -C $W .
cat $W/steps.jsonl $W/device.txt; cat $W/multi_gpu_summary.json
