#!/bin/bash
# new = TARGET (sparse markers, sampling after unmarked launches, probes only raise), alt = e52c87b:
# the transformer pair with both builds (daemon traced), time-slicing, the loop alone with the new
# build; launch-bound jobs; the latency class
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/commit.txt $W/alt_commit.txt
t0=$SECONDS
DAEMON_LOG=trace TARGET=$N ALT_TARGET=$B CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare gpushare_alt timeslice gpushare_alone" NAME=tf BUDGET=260 bench/share/sweep.sh $W/tf > $W/tf.log 2>&1
for f in $W/tf/*.gpushared.log; do xz -T4 $f; done
echo "tf done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N STEPS=2000 ROUNDS=2 STARTUP=14 BUDGET=150 MODES="timeslice gpushare" bench/throughput/launch_bound.sh $W/lb > $W/lb.log 2>&1
echo "lb done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N PHASES="solo timeslice gpushare_interactive_default" bench/latency/run.sh $W/lat > $W/lat.log 2>&1
echo "lat done $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/l.tgz -C $W .
