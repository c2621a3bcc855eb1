#!/bin/bash
# The table at a glance, shares: bench/run.sh part 17 as it now runs (each solo phase again
# after the shared ones, the transformer pair between solo phases) with .devbase/new (cd38933).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/new/commit.txt $W/commit.txt
TARGET=$B/new bench/run.sh $W 17 > $W/run.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r13.tgz -C $W .
cat $W/steps.jsonl; grep -A80 "Share sweep" $W/summary.md | cut -c1-200 | head -40
