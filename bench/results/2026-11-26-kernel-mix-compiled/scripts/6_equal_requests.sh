#!/bin/bash
# Clients of equal requests (0.5 / 0.5, two users) running loops that synchronize after every
# short kernel, under gpushare (the sweep's mix kind with one cell for both) and time-sliced,
# each solo phase again after the shared ones, with the build in .devbase/head.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
SOLO_AGAIN=1 TARGET=$B/head NAME=equal CELLS="" QUAD_CELLS="" MIX_CELLS="50us:1 200us:1" \
  TIMESLICE_CELLS="50us:1 200us:1" TRANSFORMER="" BUDGET=400 bench/share/sweep.sh $W > $W/equal.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r6.tgz -C $W .
grep -E "==|solo:|share|sum" $W/equal.log | grep -v '"'
python3 -c "
import json
d=json.load(open('$W/equal_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:round(x['share'],3) for j,x in v['jobs'].items()}, round(v['sum'],3))"
