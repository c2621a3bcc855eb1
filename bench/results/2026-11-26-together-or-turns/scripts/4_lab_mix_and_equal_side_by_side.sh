#!/bin/bash
# The lab's mix (seven users' jobs of every kind, each its user's default client: equal weights)
# time-sliced, under this build (.devbase/head) and under the build before leases could take
# turns by measured progress (.devbase/old, ALT_TARGET: the _alt phases); then the equal pairs
# (0.5 / 0.5) of 50 us kernels synchronizing after each and 1.6 ms kernels synchronizing every 4
# under both builds, each solo phase again after.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; cp $B/old/commit.txt $W/commit_alt.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head ALT_TARGET=$B/old DAEMON_LOG=trace
MODES="timeslice gpushare gpushare_alt" BUDGET=300 timeout 320 bench/mixed/run.sh $W/mixed > $W/mixed.log 2>&1
SOLO_AGAIN=1 NAME=equal CELLS="" QUAD_CELLS="" MIX_CELLS="50us:1 1600us:4" TRANSFORMER="" \
  BUDGET=230 timeout 250 bench/share/sweep.sh $W > $W/equal.log 2>&1
xz -T4 $W/*.gpushared.log $W/mixed/*.gpushared.log 2>/dev/null; tar czf $OUT/r4.tgz -C $W .
python3 -c "
import json
d=json.load(open('$W/mixed/mixed_summary.json'))
for ph,v in d['phases'].items():
  print(ph, {j:(round(x.get('share',0),3), x.get('vs_timeslice')) for j,x in v['jobs'].items()}, 'infer p99', round(v['jobs'].get('infer',{}).get('p99_ms',0),2), {k:v[k] for k in v if k.startswith('sum')})
" 2>&1 | head -20
python3 -c "
import json
d=json.load(open('$W/equal_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), round(x.get('max_error_points',0),1)) for j,x in v['jobs'].items()}, round(v['sum'],3))"
