#!/bin/bash
# pairs of different saturating jobs under gpushare and time-sliced, with the GPU's SM clock,
# power and clock event reasons sampled every 2 ms throughout (gpu_clocks.py)
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
nvidia-smi -q -d CLOCK,POWER > $W/clocks_before.txt 2>&1
python3 bench/share/gpu_clocks.py --seconds 500 > $W/clocks.csv 2> $W/clocks.err &
sampler=$!
DAEMON_LOG=trace TARGET=$N NAME=hetero CELLS="50us:1+20ms:0 200us:1+1600us:0" TIMESLICE_CELLS="50us:1+20ms:0 200us:1+1600us:0" QUAD_CELLS="" TRANSFORMER="" BUDGET=330 bench/share/sweep.sh $W > $W/hetero.log 2>&1
kill $sampler; wait $sampler
for f in $W/*.gpushared.log; do xz -T8 $f; done
xz -T8 $W/clocks.csv
tar czf $OUT/w.tgz -C $W .
