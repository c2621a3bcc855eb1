#!/bin/bash
# What the trials between leases together and turns leave as it was: the inference client beside
# three trainers (the latency bench without MPS: alone, time-sliced, gpushare with the default
# class, gpushare with the inference client interactive), the 0.75 / 0.25 pair and the 0.4 / 0.3 /
# 0.2 / 0.1 quad of 1.6 ms kernels synchronizing every 4; then the equal pair of 50 us kernels
# synchronizing after each again, each solo phase again after; the build in .devbase/head.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head
PHASES="solo timeslice gpushare_default gpushare_interactive_default" timeout 230 \
  bench/latency/run.sh $W/latency > $W/latency.log 2>&1
SOLO_AGAIN=1 NAME=unequal CELLS="1600us:4" QUAD_CELLS="1600us:4" MIX_CELLS="50us:1" TRANSFORMER="" \
  BUDGET=300 timeout 330 bench/share/sweep.sh $W > $W/unequal.log 2>&1
xz -T4 $W/*.gpushared.log $W/latency/*.log 2>/dev/null; tar czf $OUT/r3.tgz -C $W .
grep -E "p99|phase" $W/latency.log | tail -12
python3 -c "
import json
d=json.load(open('$W/unequal_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), round(x.get('max_error_points',0),1)) for j,x in v['jobs'].items()}, round(v['sum'],3))"
