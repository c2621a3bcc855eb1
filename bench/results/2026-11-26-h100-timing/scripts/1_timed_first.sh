#!/bin/bash
# the new build beside 80e2ed5 (base)
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $B/commit.txt $W/base_commit.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
TARGET=$B ALT_TARGET=$N CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare_alt gpushare timeslice" NAME=tf BUDGET=175 bench/share/sweep.sh $W/tf > $W/tf.log 2>&1
echo "tf done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N QUEUE_AHEAD=6ms CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare" NAME=tf6 BUDGET=80 bench/share/sweep.sh $W/tf6 > $W/tf6.log 2>&1
echo "tf6 done $((SECONDS-t0))" >> $W/times.txt
TARGET=$B ALT_TARGET=$N SOLO=0 MODES="timeslice gpushare_twojobs_alt gpushare_twojobs" BUDGET=180 bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
echo "mixed done $((SECONDS-t0))" >> $W/times.txt
rem=$((545 - SECONDS + t0))
TARGET=$N CELLS="1600us:0" QUAD_CELLS="" TRANSFORMER="" NAME=cells BUDGET=$rem bench/share/sweep.sh $W/cells > $W/cells.log 2>&1
echo "cells done $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/a.tgz -C $W .
