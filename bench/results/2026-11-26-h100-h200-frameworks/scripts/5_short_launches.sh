#!/bin/bash
# short launches seen done at the first look lower the time per launch learnt (.devbase/new)
# beside the build before (.devbase/base, the _alt phases): the JAX loop alone under gpushared and
# as a pair
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/base/commit.txt $W/base_commit.txt
DAEMON_LOG=trace ALT_TARGET=$B/base TARGET=$N NAME=jax LOOP=jax TF_STARTUP=30 CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare_alone gpushare_alone_alt gpushare gpushare_alt" BUDGET=330 bench/share/sweep.sh $W > $W/jax.log 2>&1
xz -T4 $W/*.gpushared.log; tar czf $OUT/r5.tgz -C $W .
