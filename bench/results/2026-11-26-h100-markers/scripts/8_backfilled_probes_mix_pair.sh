#!/bin/bash
# final build: the lab mix, one user running two jobs and one job per user, beside time-slicing,
# two rounds (the daemon traced); the transformer pair between two solo phases
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
DAEMON_LOG=trace TARGET=$N SOLO=0 ROUNDS=2 MODES="timeslice gpushare_twojobs gpushare" BUDGET=330 bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
for f in $W/mixed/*.gpushared.log; do xz -T8 $f; done
echo "mixed done $((SECONDS-t0))" >> $W/times.txt
rem=$((565 - SECONDS + t0))
SOLO_SPAN=15 TARGET=$N CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare solo" NAME=tf BUDGET=$rem bench/share/sweep.sh $W/tf > $W/tf.log 2>&1
echo "tf done $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/q.tgz -C $W .
