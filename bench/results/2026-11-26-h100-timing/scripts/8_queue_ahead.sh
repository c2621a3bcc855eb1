#!/bin/bash
# the transformer pair with queue_ahead 2 ms (default) and 6 ms, same build, and the 1.6 ms cell at 6 ms
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
TARGET=$N CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare" NAME=tf2 BUDGET=80 bench/share/sweep.sh $W/tf2 > $W/tf2.log 2>&1
TARGET=$N QUEUE_AHEAD=6ms CELLS="1600us:0" QUAD_CELLS="" TRANSFORMER="gpushare" NAME=tf6 BUDGET=160 bench/share/sweep.sh $W/tf6 > $W/tf6.log 2>&1
tar czf $OUT/h.tgz -C $W .
