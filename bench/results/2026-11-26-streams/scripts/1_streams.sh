#!/bin/bash
# Processes whose queue is more than one stream, with the build in .devbase/cur: pairs 0.75 / 0.25
# where a job spreads its kernels over several streams (,streams=K) or has a side thread that
# synchronizes a stream of its own every millisecond (,side=1000); each job against its own solo
# rate.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/cur/commit.txt $W/commit.txt
TARGET=$B/cur NAME=streams QUAD_CELLS="" TRANSFORMER="" BUDGET=450 \
  CELLS="1600us:0+1600us:0,side=1000 1600us:0+1600us:0,streams=4 200us:0,streams=4+200us:0,side=1000 20ms:0,streams=2+50us:1" \
  bench/share/sweep.sh $W > $W/streams.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r1.tgz -C $W .
grep -E "solo:|share|sum" $W/streams.log
