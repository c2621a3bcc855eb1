#!/bin/bash
# Under MPS: 4 matmul jobs and 4 small-MLP training jobs, plain MPS against gpushare under MPS
# with a lease per process (the final build, .devbase/new).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/new/commit.txt $W/new_commit.txt
TARGET=$B/new MODES="mps gpushare_mps_concurrent" COUNTS="4" bench/throughput/run.sh $W > $W/throughput.log 2>&1
tar czf $OUT/r10.tgz -C $W .
