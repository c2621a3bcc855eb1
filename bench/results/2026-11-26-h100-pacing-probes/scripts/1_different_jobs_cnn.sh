#!/bin/bash
# workloads not in the sweep so far: pairs of different saturating jobs (a at 0.75 runs the first
# cell, b at 0.25 the second) and a CNN training loop pair against its time-slicing
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
DAEMON_LOG=trace TARGET=$N NAME=hetero CELLS="50us:1+20ms:0 20ms:0+50us:1 200us:4+1600us:0" QUAD_CELLS="" TRANSFORMER="" BUDGET=320 bench/share/sweep.sh $W > $W/hetero.log 2>&1
echo "hetero done $((SECONDS-t0))" >> $W/times.txt
DAEMON_LOG=trace TARGET=$N NAME=cnn LOOP=cnn CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice solo" BUDGET=200 bench/share/sweep.sh $W > $W/cnn.log 2>&1
echo "cnn done $((SECONDS-t0))" >> $W/times.txt
for f in $W/*.gpushared.log; do xz -T8 $f; done
tar czf $OUT/u.tgz -C $W .
