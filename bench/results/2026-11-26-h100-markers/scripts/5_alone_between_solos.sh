#!/bin/bash
# the transformer loop alone under the hook, both builds (new = TARGET, alt = e52c87b), twice each,
# between three solo phases of the same length (the host's speed drifts)
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/commit.txt $W/alt_commit.txt
SOLO_SPAN=15 TARGET=$N ALT_TARGET=$B CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare_alone gpushare_alone_alt solo gpushare_alone_alt gpushare_alone solo" NAME=ab BUDGET=420 bench/share/sweep.sh $W/ab > $W/ab.log 2>&1
tar czf $OUT/n.tgz -C $W .
