#!/bin/bash
# Equal pairs (0.5 / 0.5) of 16 ms kernels never synchronizing, alone and beside 50 us kernels
# synchronizing after each, under this build (.devbase/head: trial windows that wait for enough
# launches) and the build before (.devbase/old, the _alt phases); the equal pair of 50 us kernels
# synchronizing after each; 8 launch-bound MLP jobs of 8 users, time-sliced and under this build;
# inference beside three trainers, every process its own client of request 0.25.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; cp $B/old/commit.txt $W/commit_alt.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head DAEMON_LOG=trace
ALT_TARGET=$B/old SOLO_AGAIN=1 NAME=big CELLS="" QUAD_CELLS="" MIX_CELLS="20ms:0 20ms:0+50us:1" \
  MIX_REQUESTS=0.5/0.5 TRANSFORMER="" BUDGET=250 timeout 270 bench/share/sweep.sh $W > $W/big.log 2>&1
SOLO_AGAIN=1 NAME=small CELLS="" QUAD_CELLS="" MIX_CELLS="50us:1" MIX_REQUESTS=0.5/0.5 TRANSFORMER="" \
  BUDGET=70 timeout 80 bench/share/sweep.sh $W > $W/small.log 2>&1
ROUNDS=1 MODES="timeslice gpushare_users" BUDGET=90 timeout 100 bench/throughput/launch_bound.sh $W > $W/launch_bound.log 2>&1
PHASES="solo timeslice gpushare_own_default" timeout 100 bench/latency/run.sh $W/latency > $W/latency.log 2>&1
for f in $W/*.gpushared.log $W/latency/*.gpushared.log; do
  echo "== $(basename $f): grants by mode: $(grep -c 'mode=Some(Together)' $f) together, $(grep -c 'mode=Some(Turns)' $f) turns"
done
xz -T4 $W/*.gpushared.log $W/latency/*.gpushared.log 2>/dev/null; tar czf $OUT/r2.tgz -C $W .
for n in big small; do python3 -c "
import json
d=json.load(open('$W/${n}_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), round(x.get('max_error_points',0),1)) for j,x in v['jobs'].items()}, round(v.get('sum',0),3))"; done
grep -E "aggregate|vs time" $W/launch_bound.log | tail -4
python3 -c "
import json; d=json.load(open('$W/latency/latency_summary.json'))
for k,v in d.items(): print(k, v)"
