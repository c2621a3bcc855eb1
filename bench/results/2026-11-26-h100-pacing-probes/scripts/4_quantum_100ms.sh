#!/bin/bash
# longer leases: pairs of different saturating jobs with 100 ms leases (the GPU's clocks sampled),
# then the transformer pair with the default 20 ms and with 100 ms leases, solo phases between
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
python3 bench/share/gpu_clocks.py --seconds 560 > $W/clocks.csv 2> $W/clocks.err &
sampler=$!
QUANTUM=100ms TARGET=$N NAME=hetero100 CELLS="50us:1+20ms:0 200us:1+1600us:0" QUAD_CELLS="" TRANSFORMER="" BUDGET=200 bench/share/sweep.sh $W > $W/hetero100.log 2>&1
TARGET=$N NAME=tf20 CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare solo" BUDGET=120 bench/share/sweep.sh $W > $W/tf20.log 2>&1
QUANTUM=100ms TARGET=$N NAME=tf100 CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare solo" BUDGET=120 bench/share/sweep.sh $W > $W/tf100.log 2>&1
kill $sampler; wait $sampler
xz -T8 $W/clocks.csv
tar czf $OUT/x.tgz -C $W .
