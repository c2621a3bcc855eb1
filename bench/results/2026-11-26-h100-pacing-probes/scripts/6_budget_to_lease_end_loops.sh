#!/bin/bash
# the queue budget to the lease's end (new) against queue_ahead all along (alt, HEAD's hook):
# transformer pair and alone, CNN pair, solo phases between
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W /tmp/alt; mkdir -p $W /tmp/alt
cp $N/gpushared /tmp/alt/; cp $B/altlib/libgpushare.so /tmp/alt/
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
ALT_TARGET=/tmp/alt TARGET=$N NAME=tf CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare gpushare_alt solo gpushare_alone gpushare_alone_alt solo" BUDGET=320 bench/share/sweep.sh $W > $W/tf.log 2>&1
ALT_TARGET=/tmp/alt TARGET=$N NAME=cnn LOOP=cnn CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare gpushare_alt solo" BUDGET=170 bench/share/sweep.sh $W > $W/cnn.log 2>&1
tar czf $OUT/z1.tgz -C $W .
