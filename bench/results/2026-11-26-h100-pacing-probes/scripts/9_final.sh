#!/bin/bash
# the final build: cells twice each (ALT_TARGET is the same build), the 20 ms pair among them;
# different jobs paired; the transformer pair between solo phases; the lab mix against
# time-slicing
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
ALT_TARGET=$N TARGET=$N NAME=final CELLS="20ms:0 50us:1+20ms:0 1600us:0" QUAD_CELLS="" TRANSFORMER="gpushare solo" BUDGET=380 bench/share/sweep.sh $W > $W/final.log 2>&1
echo "sweep $((SECONDS-t0))" >> $W/times.txt
TARGET=$N SOLO=0 ROUNDS=1 MODES="gpushare timeslice" BUDGET=120 bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
echo "mixed $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/f.tgz -C $W .
