#!/bin/bash
# the final build (.devbase/new): pairs of 1.6 ms kernels never synchronizing and 20 ms kernels
# synchronizing after each, then the transformer pair
set -u
B=$PWD/.devbase; N=$B/new; W=$OUT/w; mkdir -p $W
for f in $N/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt
TARGET=$N NAME=final CELLS="1600us:0 20ms:1" QUAD_CELLS="" TRANSFORMER="gpushare" BUDGET=120 bench/share/sweep.sh $W > $W/final.log 2>&1
