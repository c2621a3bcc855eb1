#!/bin/bash
# The table at a glance, work conservation, latency and MPS: bench/run.sh part 18 with HEAD's
# build (.devbase/base).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/base/commit.txt $W/commit.txt
TARGET=$B/base bench/run.sh $W 18 > $W/run.log 2>&1
xz -T4 $W/*.gpushared.log $W/*/*.gpushared.log 2>/dev/null; tar czf $OUT/r3.tgz -C $W .
cat $W/steps.jsonl; grep -B2 -A30 "Launch-bound\|Latency isolation\|Aggregate" $W/summary.md | cut -c1-200 | head -60
