#!/bin/bash
# 7732f16 (new): the lab mix, the transformer pair twice and time-slicing, share cells, the latency class
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
TARGET=$N SOLO=0 MODES="timeslice gpushare gpushare_twojobs" BUDGET=200 bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
echo "mixed done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N ALT_TARGET=$N CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice gpushare_alt" NAME=tf BUDGET=175 bench/share/sweep.sh $W/tf > $W/tf.log 2>&1
echo "tf done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N PHASES="solo timeslice gpushare_interactive_default" bench/latency/run.sh $W/lat > $W/lat.log 2>&1
echo "lat done $((SECONDS-t0))" >> $W/times.txt
rem=$((560 - SECONDS + t0))
TARGET=$N CELLS="1600us:0" QUAD_CELLS="50us:1" TRANSFORMER="" NAME=cells BUDGET=$rem bench/share/sweep.sh $W/cells > $W/cells.log 2>&1
echo "cells done $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/f.tgz -C $W .
