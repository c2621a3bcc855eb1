#!/bin/bash
# The transformer pair with solo phases between all others (.devbase/cur): solo, gpushare, solo,
# gpushare, solo, time-sliced, solo, gpushare, solo; each shared phase can then be taken against
# the solo phases on either side of it (the host's speed drifts within a call).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/cur/commit.txt $W/commit.txt
TARGET=$B/cur NAME=tf CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare solo gpushare solo timeslice solo gpushare solo" \
  BUDGET=520 bench/share/sweep.sh $W > $W/tf.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r2.tgz -C $W .
grep -E "==|solo:|share|sum" $W/tf.log
