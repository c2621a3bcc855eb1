#!/bin/bash
# the queue budget to the lease's end (new) against queue_ahead all along (alt, HEAD's hook):
# two-client cells (1.6 ms and 20 ms kernels never synchronizing, 50 us synchronizing each beside
# 20 ms), the latency class beside trainers, launch-bound jobs
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W /tmp/alt; mkdir -p $W /tmp/alt
cp $N/gpushared /tmp/alt/; cp $B/altlib/libgpushare.so /tmp/alt/
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
ALT_TARGET=/tmp/alt TARGET=$N NAME=cells CELLS="1600us:0 20ms:0 50us:1+20ms:0" QUAD_CELLS="" TRANSFORMER="" BUDGET=300 bench/share/sweep.sh $W > $W/cells.log 2>&1
echo "cells $((SECONDS-t0))" >> $W/times.txt
TARGET=$N PHASES="solo gpushare_interactive" bench/latency/run.sh $W/latency > $W/latency.log 2>&1
echo "latency $((SECONDS-t0))" >> $W/times.txt
ALT_TARGET=/tmp/alt TARGET=$N ROUNDS=1 MODES="timeslice gpushare gpushare_alt" BUDGET=140 bench/throughput/launch_bound.sh $W/lb > $W/lb.log 2>&1
echo "lb $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/z2.tgz -C $W .
