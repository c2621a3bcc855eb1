#!/bin/bash
# Demand samples of revoked leases weighed by the part that ran, and no probe for a busy sample
# of a session estimated surely busy (.devbase/new), against .devbase/cur: the inference client
# as a batch client and as an interactive one beside three trainers (new, cur, new again), then
# the lab's mix (time-sliced, new, cur as _alt).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in cur new; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
for run in new:"solo timeslice gpushare_default gpushare_interactive_default" \
           cur:"solo gpushare_default gpushare_interactive_default" new2:"solo gpushare_default"; do
  n=${run%%:*}; b=${n%2}; mkdir -p $W/lat_$n
  DAEMON_LOG=trace TARGET=$B/$b PHASES="${run#*:}" bench/latency/run.sh $W/lat_$n > $W/lat_$n.log 2>&1
  python3 -c "
import json; d=json.load(open('$W/lat_$n/latency_summary.json'))
for k,v in d.items(): print('$n', k, v.get('p50_ms') and round(v['p50_ms'],2), v.get('p99_ms') and round(v['p99_ms'],2), v.get('trainer_iters_per_s'), v.get('error',''))"
done
mkdir -p $W/mix
TARGET=$B/new ALT_TARGET=$B/cur SOLO=0 MODES="timeslice gpushare gpushare_alt" BUDGET=300 \
  bench/mixed/run.sh $W/mix > $W/mix.log 2>&1
xz -T4 $W/*/*.gpushared.log 2>/dev/null; tar czf $OUT/r6.tgz -C $W .
python3 -c "
import json; d=json.load(open('$W/mix/mixed_summary.json'))
for k,v in d.get('phases',{}).items():
  if k.endswith('.solo'): continue
  print(k, {j:(round(x.get('vs_timeslice') or 0,3), round(x['p99_ms'],2) if 'p99_ms' in x else '') for j,x in v['jobs'].items()})"
