#!/bin/bash
# what the hook costs a host-bound training loop: the transformer loop solo, with the hook loaded
# but no daemon, and alone under gpushared, interleaved (the host's speed drifts)
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
SOLO_SPAN=12 SPAN=12 TARGET=$N NAME=cost CELLS="" QUAD_CELLS="" TRANSFORMER="hooked gpushare_alone solo hooked gpushare_alone solo hooked" BUDGET=330 bench/share/sweep.sh $W > $W/cost.log 2>&1
SOLO_SPAN=8 SPAN=12 TARGET=$N NAME=mlp LOOP=mlp CELLS="" QUAD_CELLS="" TRANSFORMER="hooked gpushare_alone solo hooked gpushare_alone" BUDGET=220 bench/share/sweep.sh $W > $W/mlp.log 2>&1
tar czf $OUT/v.tgz -C $W .
