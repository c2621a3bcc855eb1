#!/bin/bash
# 16 launch-bound MLP jobs of 16 users again with 2f96488 (.devbase/final): time-sliced and under
# gpushare, four rounds (the order reversed in even rounds); the jobs' counters in PHASE.stats.txt.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/final/commit.txt $W/commit.txt; nproc > $W/nproc.txt
TARGET=$B/final JOBS=16 ROUNDS=4 MODES="timeslice gpushare_users" BUDGET=420 \
  bench/throughput/launch_bound.sh $W > $W/lb.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r8.tgz -C $W .
python3 -c "
import json; d=json.load(open('$W/launch_bound_summary.json'))
for m,v in d.get('modes',{}).items():
  print(m, round(v['aggregate_steps_per_s']), v.get('vs_timeslice'), v.get('vs_timeslice_per_round'), round(v['mean_job_wall_s'],2))
  for r,x in v['rounds'].items(): print('  ', r, 'makespan %.2f' % x['makespan_s'], 'walls', ' '.join('%.2f' % w for w in sorted(x['job_wall_s'])))"
