#!/bin/bash
# 16 launch-bound MLP jobs at once with 2f96488 (.devbase/final): time-sliced, under gpushare as
# one user's 16 processes (one client), and as 16 users' (16 clients); two rounds.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/final/commit.txt $W/commit.txt
TARGET=$B/final JOBS=16 ROUNDS=2 MODES="timeslice gpushare gpushare_users" BUDGET=420 \
  bench/throughput/launch_bound.sh $W > $W/lb.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r7.tgz -C $W .
python3 -c "
import json; d=json.load(open('$W/launch_bound_summary.json'))
for m,v in d.get('modes',{}).items(): print(m, round(v['aggregate_steps_per_s']), v.get('vs_timeslice'), v.get('vs_timeslice_per_round'), round(v['mean_job_wall_s'],2))"
