#!/bin/bash
# Call 2 again with windows that wait for 64 launches of all processes together: the equal pairs
# (0.5 / 0.5) of 16 ms kernels never synchronizing, alone and beside 50 us kernels synchronizing
# after each, under this build (.devbase/head) and the build before trial windows waited for
# launches (.devbase/old, the _alt phases); 8 launch-bound MLP jobs of 8 users, time-sliced and
# under this build; equal pairs of 1.6 ms kernels never synchronizing beside 50 us ones
# synchronizing after each, and of 200 us kernels synchronizing after each.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; cp $B/old/commit.txt $W/commit_alt.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head DAEMON_LOG=trace
ALT_TARGET=$B/old SOLO_AGAIN=1 NAME=big CELLS="" QUAD_CELLS="" MIX_CELLS="20ms:0 20ms:0+50us:1" \
  MIX_REQUESTS=0.5/0.5 TRANSFORMER="" BUDGET=250 timeout 270 bench/share/sweep.sh $W > $W/big.log 2>&1
ROUNDS=1 MODES="timeslice gpushare_users" BUDGET=150 timeout 170 bench/throughput/launch_bound.sh $W > $W/launch_bound.log 2>&1
SOLO_AGAIN=1 NAME=more CELLS="" QUAD_CELLS="" MIX_CELLS="1600us:0+50us:1 200us:1" MIX_REQUESTS=0.5/0.5 TRANSFORMER="" \
  BUDGET=150 timeout 160 bench/share/sweep.sh $W > $W/more.log 2>&1
for f in $W/*.gpushared.log; do
  echo "== $(basename $f): grants by mode: $(grep -c 'mode=Some(Together)' $f) together, $(grep -c 'mode=Some(Turns)' $f) turns"
done
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r3.tgz -C $W .
for n in big more; do python3 -c "
import json
d=json.load(open('$W/${n}_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), round(x.get('max_error_points',0),1)) for j,x in v['jobs'].items()}, round(v.get('sum',0),3))"; done
python3 -c "
import json; d=json.load(open('$W/launch_bound_summary.json'))
print({m: round(v.get('aggregate_steps_per_s',0),1) for m,v in d['modes'].items()}, d.get('errors'))"
