#!/bin/bash
# The transformer training loop of two users at equal requests (0.5 / 0.5) under gpushare and
# time-sliced, the solo phase again after; then pairs of equal requests: 200 us kernels
# synchronizing after each (again), 1.6 ms kernels never synchronizing (queues of ~1 s), and the
# first beside a light job (50 us kernels, 500 us of host work after each synchronize), each solo
# phase again after; the build in .devbase/head, the daemon traced.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head DAEMON_LOG=trace
SOLO_AGAIN=1 NAME=equal CELLS="" QUAD_CELLS="" MIX_CELLS="200us:1 1600us:0 200us:1+50us:1:500" \
  TRANSFORMER="gpushare timeslice solo" LOOP_REQUESTS=0.5/0.5 BUDGET=520 timeout 560 \
  bench/share/sweep.sh $W > $W/equal.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r2.tgz -C $W .
grep -E "solo:" $W/equal.log
python3 -c "
import json
d=json.load(open('$W/equal_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), round(x.get('max_error_points',0),1)) for j,x in v['jobs'].items()}, round(v['sum'],3))"
