#!/bin/bash
# final build: the latency class, launch-bound jobs
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
TARGET=$N PHASES="solo timeslice gpushare_interactive_default" bench/latency/run.sh $W/lat > $W/lat.log 2>&1
echo "lat done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N STEPS=2000 ROUNDS=2 STARTUP=14 BUDGET=150 MODES="timeslice gpushare" bench/throughput/launch_bound.sh $W/lb > $W/lb.log 2>&1
echo "lb done $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/r.tgz -C $W .
