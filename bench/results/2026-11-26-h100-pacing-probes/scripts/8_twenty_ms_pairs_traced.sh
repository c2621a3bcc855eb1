#!/bin/bash
# 20 ms kernels, pairs of clients 0.75 / 0.25, both hooks, the daemon traced: how often the pair
# ends up overlapping (each at the same rate)
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W /tmp/alt; mkdir -p $W /tmp/alt
cp $N/gpushared /tmp/alt/; cp $B/altlib/libgpushare.so /tmp/alt/
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
DAEMON_LOG=trace SPAN=10 ALT_TARGET=/tmp/alt TARGET=$N NAME=big CELLS="20ms:0 20ms:1" QUAD_CELLS="" TRANSFORMER="" BUDGET=240 bench/share/sweep.sh $W > $W/big.log 2>&1
xz -T8 $W/big.gpushared.log
tar czf $OUT/z3.tgz -C $W .
