#!/bin/bash
# a process due a probe that never comes extends its lease: the lab mix (one job per user, two
# jobs of one user) beside time-slicing, two rounds, the daemon traced; launch-bound jobs
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
DAEMON_LOG=trace TARGET=$N SOLO=0 ROUNDS=2 MODES="timeslice gpushare gpushare_twojobs" BUDGET=330 bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
for f in $W/mixed/*.gpushared.log; do xz -T8 $f; done
echo "mixed done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N STEPS=2000 ROUNDS=2 STARTUP=14 BUDGET=150 MODES="timeslice gpushare" bench/throughput/launch_bound.sh $W/lb > $W/lb.log 2>&1
echo "lb done $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/s.tgz -C $W .
