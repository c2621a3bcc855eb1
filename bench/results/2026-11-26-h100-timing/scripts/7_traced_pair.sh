#!/bin/bash
# the transformer pair traced (daemon at trace level), twice
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
DAEMON_LOG=trace TARGET=$N ALT_TARGET=$N CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare gpushare_alt" NAME=tf BUDGET=140 bench/share/sweep.sh $W/tf > $W/tf.log 2>&1
for f in $W/tf/*.gpushared.log; do xz -T4 $f; done
tar czf $OUT/g.tgz -C $W .
