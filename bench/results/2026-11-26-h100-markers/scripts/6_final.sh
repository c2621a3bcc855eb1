#!/bin/bash
# the final build (new = TARGET): the transformer pair twice and time-slicing between two solo
# phases; kernel cells 1.6 ms and 20 ms never synchronizing, and the four-client 50 us cell
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
SOLO_SPAN=15 TARGET=$N CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice gpushare solo" NAME=tf BUDGET=250 bench/share/sweep.sh $W/tf > $W/tf.log 2>&1
echo "tf done $((SECONDS-t0))" >> $W/times.txt
rem=$((560 - SECONDS + t0))
TARGET=$N CELLS="1600us:0 20ms:0" QUAD_CELLS="50us:1" TRANSFORMER="" NAME=cells BUDGET=$rem bench/share/sweep.sh $W/cells > $W/cells.log 2>&1
echo "cells done $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/o.tgz -C $W .
