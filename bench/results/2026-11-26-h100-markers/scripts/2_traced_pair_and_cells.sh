#!/bin/bash
# the transformer pair with the new build, traced (daemon at trace level); then two short-kernel
# cells with both builds (new = TARGET, alt = e52c87b)
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/commit.txt $W/alt_commit.txt
DAEMON_LOG=trace TARGET=$N CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare" NAME=tft BUDGET=100 bench/share/sweep.sh $W/tft > $W/tft.log 2>&1
for f in $W/tft/*.gpushared.log; do xz -T4 $f; done
TARGET=$N ALT_TARGET=$B CELLS="50us:0 200us:4" QUAD_CELLS="" TRANSFORMER="" NAME=cells BUDGET=300 bench/share/sweep.sh $W/cells > $W/cells.log 2>&1
tar czf $OUT/k.tgz -C $W .
