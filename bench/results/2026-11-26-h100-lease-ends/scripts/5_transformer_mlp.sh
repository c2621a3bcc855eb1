#!/bin/bash
# The final build (.devbase/new) beside the build before (.devbase/base, _alt): the transformer
# training loops' pair three times each, alternating, with solo phases among them (shares against
# their mean); then the 8 launch-bound MLP jobs of 8 users, time-sliced and under each build.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in base new; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
ALT_TARGET=$B/base TARGET=$B/new NAME=tf CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt solo gpushare_alt gpushare solo gpushare gpushare_alt" \
  BUDGET=300 bench/share/sweep.sh $W > $W/tf.log 2>&1
ALT_TARGET=$B/base TARGET=$B/new ROUNDS=1 MODES="timeslice gpushare_users gpushare_users_alt" BUDGET=200 \
  bench/throughput/launch_bound.sh $W > $W/lb.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r5.tgz -C $W .
