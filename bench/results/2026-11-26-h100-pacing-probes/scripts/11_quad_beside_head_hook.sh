#!/bin/bash
# four clients of 50 us kernels synchronizing each, the final build and (alt) the final daemon
# with HEAD 91328f5's hook, the daemon traced
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W /tmp/alt; mkdir -p $W /tmp/alt
cp $N/gpushared /tmp/alt/; cp $B/altlib/libgpushare.so /tmp/alt/
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
DAEMON_LOG=trace ALT_TARGET=/tmp/alt TARGET=$N NAME=quad CELLS="" QUAD_CELLS="50us:1" TRANSFORMER="" BUDGET=300 bench/share/sweep.sh $W > $W/quad.log 2>&1
xz -T8 $W/quad.gpushared.log
tar czf $OUT/q2.tgz -C $W .
