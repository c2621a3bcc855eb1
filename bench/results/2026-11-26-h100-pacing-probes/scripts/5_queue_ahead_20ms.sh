#!/bin/bash
# the queue bound and host-bound training loops: the transformer pair and the CNN pair with the
# default queue_ahead (2 ms) and with 20 ms, solo phases between
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
TARGET=$N NAME=tf2 CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare solo" BUDGET=120 bench/share/sweep.sh $W > $W/tf2.log 2>&1
QUEUE_AHEAD=20ms TARGET=$N NAME=tf20q CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare gpushare_alone solo" BUDGET=170 bench/share/sweep.sh $W > $W/tf20q.log 2>&1
TARGET=$N NAME=cnn2 LOOP=cnn CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare" BUDGET=80 bench/share/sweep.sh $W > $W/cnn2.log 2>&1
QUEUE_AHEAD=20ms TARGET=$N NAME=cnn20q LOOP=cnn CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare" BUDGET=80 bench/share/sweep.sh $W > $W/cnn20q.log 2>&1
tar czf $OUT/y.tgz -C $W .
