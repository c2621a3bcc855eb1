#!/bin/bash
# the lab mix with one user running two jobs, twice, beside time-slicing twice; the daemon
# traced, the inference client's slowest requests recorded (final build)
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
DAEMON_LOG=trace TARGET=$N SOLO=0 ROUNDS=2 MODES="timeslice gpushare_twojobs" BUDGET=400 bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
for f in $W/mixed/*.gpushared.log; do xz -T8 $f; done
tar czf $OUT/p.tgz -C $W .
