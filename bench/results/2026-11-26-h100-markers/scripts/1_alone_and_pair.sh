#!/bin/bash
# the transformer loop under both builds: alone (the hook's cost) and as the 0.75/0.25 pair, beside
# its solo rate and time-slicing; new = TARGET (sparse markers), alt = e52c87b
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/commit.txt $W/alt_commit.txt
TARGET=$N ALT_TARGET=$B CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare_alone gpushare_alone_alt gpushare gpushare_alt timeslice" NAME=tf BUDGET=420 bench/share/sweep.sh $W/tf > $W/tf.log 2>&1
tar czf $OUT/j.tgz -C $W .
