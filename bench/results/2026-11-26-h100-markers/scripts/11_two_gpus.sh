#!/bin/bash
# two GPUs (kind nvidia-h200-x2): one saturating job per GPU under gpushare against without it,
# and the memory cap per GPU (final build, .devbase/new only)
W=/tmp/w; mkdir -p $W; nvidia-smi -L > $W/gpu.txt; cp .devbase/new/commit.txt $W/new_commit.txt
TARGET=$PWD/.devbase/new bench/multi_gpu/run.sh $W/multi > $W/multi.log 2>&1
tar czf $OUT/t.tgz -C $W .
