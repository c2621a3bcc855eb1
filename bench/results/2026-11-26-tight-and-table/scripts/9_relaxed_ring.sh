#!/bin/bash
# 16 launch-bound MLP jobs of 16 users: 2f96488's hook (.devbase/final) against one whose relaxed
# leases hold the queue back only at 63 markers pending, not 31 (.devbase/ring, as `_alt`), and
# time-slicing; four rounds, the order reversed in even rounds.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in final ring; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
TARGET=$B/final ALT_TARGET=$B/ring JOBS=16 ROUNDS=4 MODES="timeslice gpushare_users gpushare_users_alt" \
  BUDGET=540 bench/throughput/launch_bound.sh $W > $W/lb.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r9.tgz -C $W .
python3 -c "
import json; d=json.load(open('$W/launch_bound_summary.json'))
for m,v in d.get('modes',{}).items():
  print(m, round(v['aggregate_steps_per_s']), v.get('vs_timeslice'), v.get('vs_timeslice_per_round'), round(v['mean_job_wall_s'],3))
  for r,x in v['rounds'].items(): print('  ', r, 'makespan %.2f' % x['makespan_s'], 'walls', ' '.join('%.2f' % w for w in sorted(x['job_wall_s'])[-4:]))"
for f in $W/gpushare_users*.stats.txt; do echo "$(basename $f): waits $(grep -o '[0-9]* waits' $f | awk '{s+=$1} END {print s}')"; done
