#!/bin/bash
# four clients, 1.6 ms kernels synchronizing every 4 then 50 us synchronizing each (the order in
# which the latter lost most of the GPU once), each twice with the final build, the daemon traced
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
DAEMON_LOG=trace ALT_TARGET=$N TARGET=$N NAME=quad CELLS="" QUAD_CELLS="1600us:4 50us:1" TRANSFORMER="" BUDGET=330 bench/share/sweep.sh $W > $W/quad.log 2>&1
xz -T8 $W/quad.gpushared.log
tar czf $OUT/q3.tgz -C $W .
