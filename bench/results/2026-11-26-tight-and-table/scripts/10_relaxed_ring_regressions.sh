#!/bin/bash
# Where relaxed leases run, the hook of .devbase/ring (as `_alt`; gpushared and gpushare from
# .devbase/final, which it does not change) against .devbase/final: 8 launch-bound jobs of 8
# users (two rounds), then the lab's mix (seven users' jobs, time-sliced and under both builds).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
R=/tmp/ring_full; rm -rf $R; mkdir -p $R; cp $B/final/gpushared $B/final/gpushare $B/ring/libgpushare.so $R/
nvidia-smi -L > $W/gpu.txt; for b in final ring; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
mkdir -p $W/lb8 $W/mix
TARGET=$B/final ALT_TARGET=$R JOBS=8 ROUNDS=2 MODES="timeslice gpushare_users gpushare_users_alt" \
  BUDGET=200 bench/throughput/launch_bound.sh $W/lb8 > $W/lb8.log 2>&1
python3 -c "
import json; d=json.load(open('$W/lb8/launch_bound_summary.json'))
for m,v in d.get('modes',{}).items(): print('8 jobs', m, round(v['aggregate_steps_per_s']), v.get('vs_timeslice'), v.get('vs_timeslice_per_round'))"
TARGET=$B/final ALT_TARGET=$R MODES="timeslice gpushare gpushare_alt" BUDGET=330 \
  bench/mixed/run.sh $W/mix > $W/mix.log 2>&1
xz -T4 $W/*/*.gpushared.log 2>/dev/null; tar czf $OUT/r10.tgz -C $W .
python3 -c "
import json; d=json.load(open('$W/mix/mixed_summary.json'))
for k,v in d.get('phases',{}).items():
  if k.endswith('.solo'): continue
  print(k, 'sum', round(v.get('sum_of_shares') or 0,3), {j:(round(x.get('vs_timeslice', x.get('share',0)) or 0,3), round(x['p99_ms'],2) if 'p99_ms' in x else '') for j,x in v['jobs'].items()})"
