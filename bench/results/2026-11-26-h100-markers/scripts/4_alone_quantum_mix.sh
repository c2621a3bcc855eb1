#!/bin/bash
# new = TARGET (2972bb5+44f25b1 build), alt = e52c87b: the transformer alone with both builds
# again; the pair with leases of 20 ms (default) and 80 ms; the lab mix
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/commit.txt $W/alt_commit.txt
t0=$SECONDS
TARGET=$N ALT_TARGET=$B CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare_alone gpushare_alone_alt gpushare" NAME=tf BUDGET=200 bench/share/sweep.sh $W/tf > $W/tf.log 2>&1
echo "tf done $((SECONDS-t0))" >> $W/times.txt
QUANTUM=80ms TARGET=$N CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare" NAME=tf80 BUDGET=100 bench/share/sweep.sh $W/tf80 > $W/tf80.log 2>&1
echo "tf80 done $((SECONDS-t0))" >> $W/times.txt
rem=$((570 - SECONDS + t0))
TARGET=$N SOLO=0 MODES="timeslice gpushare" BUDGET=$rem bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
echo "mixed done $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/m.tgz -C $W .
