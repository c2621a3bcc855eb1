#!/bin/bash
# the new build beside e8587d1 (base)
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $B/commit.txt $W/base_commit.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
TARGET=$B ALT_TARGET=$N CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare_alt gpushare timeslice" NAME=tf BUDGET=175 bench/share/sweep.sh $W/tf > $W/tf.log 2>&1
echo "tf done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N QUEUE_AHEAD=4ms CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare" NAME=tf4 BUDGET=80 bench/share/sweep.sh $W/tf4 > $W/tf4.log 2>&1
echo "tf4 done $((SECONDS-t0))" >> $W/times.txt
TARGET=$B ALT_TARGET=$N SOLO=0 MODES="timeslice gpushare_twojobs_alt gpushare_twojobs gpushare_alt" BUDGET=200 bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
echo "mixed done $((SECONDS-t0))" >> $W/times.txt
rem=$((560 - SECONDS + t0))
TARGET=$N CELLS="1600us:0 20ms:0" QUAD_CELLS="50us:1" TRANSFORMER="" NAME=cells BUDGET=$rem bench/share/sweep.sh $W/cells > $W/cells.log 2>&1
echo "cells done $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/b.tgz -C $W .
