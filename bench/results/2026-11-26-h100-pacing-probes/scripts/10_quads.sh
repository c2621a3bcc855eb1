#!/bin/bash
# the final build: four clients (1.6 ms kernels synchronizing every 4, 50 us synchronizing each)
# and pairs of 50 us synchronizing each and 200 us never synchronizing
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
TARGET=$N NAME=quad CELLS="50us:1 200us:0" QUAD_CELLS="1600us:4 50us:1" TRANSFORMER="" BUDGET=420 bench/share/sweep.sh $W > $W/quad.log 2>&1
tar czf $OUT/q.tgz -C $W .
