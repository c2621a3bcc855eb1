#!/bin/bash
# the new build (.devbase/new) beside the one before it (.devbase/prev, as the _alt phases):
# four clients (50 us synchronizing each, the daemon traced; 1.6 ms synchronizing every 4),
# pairs (20 ms never synchronizing, 50 us synchronizing each), then the lab mix against
# time-slicing with the new build
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/prev/commit.txt $W/prev_commit.txt
t0=$SECONDS
DAEMON_LOG=trace ALT_TARGET=$B/prev TARGET=$N NAME=quad CELLS="" QUAD_CELLS="50us:1" TRANSFORMER="" BUDGET=150 bench/share/sweep.sh $W > $W/quad.log 2>&1
xz -T8 $W/quad.gpushared.log
echo "quad $((SECONDS-t0))" >> $W/times.txt
ALT_TARGET=$B/prev TARGET=$N NAME=cells CELLS="20ms:0 50us:1" QUAD_CELLS="1600us:4" TRANSFORMER="" BUDGET=260 bench/share/sweep.sh $W > $W/cells.log 2>&1
echo "cells $((SECONDS-t0))" >> $W/times.txt
TARGET=$N SOLO=0 ROUNDS=1 MODES="gpushare timeslice" BUDGET=110 bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
echo "mixed $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/r1.tgz -C $W .
