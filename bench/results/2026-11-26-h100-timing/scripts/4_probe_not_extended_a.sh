#!/bin/bash
# ca213de (new): transformer pair twice and time-slicing; share cells
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
TARGET=$N ALT_TARGET=$N CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice gpushare_alt" NAME=tf BUDGET=175 bench/share/sweep.sh $W/tf > $W/tf.log 2>&1
echo "tf done $((SECONDS-t0))" >> $W/times.txt
rem=$((570 - SECONDS + t0))
DAEMON_LOG=trace TARGET=$N CELLS="1600us:0 1600us:4 20ms:0" QUAD_CELLS="50us:1" TRANSFORMER="" NAME=cells BUDGET=$rem bench/share/sweep.sh $W/cells > $W/cells.log 2>&1
echo "cells done $((SECONDS-t0))" >> $W/times.txt
for f in $W/cells/*.gpushared.log; do xz -T4 $f; done; tar czf $OUT/d1.tgz -C $W .
