#!/bin/bash
# The launch-bound and latency rows of bench/run.sh part 18 (8 launch-bound MLP jobs of 8 users
# against time-slicing, two rounds; the interactive inference client beside three trainers), with
# the build in .devbase/head.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head
ROUNDS=2 MODES="timeslice gpushare_users" BUDGET=240 timeout 280 bench/throughput/launch_bound.sh $W > $W/launch_bound.log 2>&1
PHASES="solo timeslice gpushare_interactive_default" timeout 150 bench/latency/run.sh $W/interactive > $W/latency.log 2>&1
python3 bench/report.py $W > /dev/null 2>&1
xz -T4 $W/*.gpushared.log $W/*/*.gpushared.log 2>/dev/null; tar czf $OUT/r3.tgz -C $W .
tail -15 $W/launch_bound.log; tail -15 $W/latency.log; grep -A30 -i "launch-bound\|latency" $W/summary.md | head -50
