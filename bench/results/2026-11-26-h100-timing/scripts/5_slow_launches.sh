#!/bin/bash
# ff54120 (new): the lab mix, the transformer pair, four clients of 50 us kernels, the latency class
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
TARGET=$N SOLO=0 MODES="timeslice gpushare gpushare_twojobs" BUDGET=200 bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
echo "mixed done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N CELLS="" QUAD_CELLS="50us:1" TRANSFORMER="gpushare timeslice" NAME=sweep BUDGET=260 bench/share/sweep.sh $W/sweep > $W/sweep.log 2>&1
echo "sweep done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N PHASES="solo timeslice gpushare_interactive_default" bench/latency/run.sh $W/lat > $W/lat.log 2>&1
echo "lat done $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/e.tgz -C $W .
