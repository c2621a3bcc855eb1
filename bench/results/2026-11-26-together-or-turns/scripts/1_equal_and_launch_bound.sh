#!/bin/bash
# Leases together or in turns, chosen by the launches the processes report: 8 launch-bound MLP
# jobs of 8 users against time-slicing (two rounds), pairs of equal requests (0.5 / 0.5, two
# users) of loops that synchronize after every 50 us or 200 us kernel and every fourth 1.6 ms
# one (the sweep's mix kind, each solo phase again after), and the 0.75 / 0.25 pair of the first,
# with the build in .devbase/head, the daemon traced (each grant with the mode in effect).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head DAEMON_LOG=trace
ROUNDS=2 MODES="timeslice gpushare_users" BUDGET=150 timeout 170 bench/throughput/launch_bound.sh $W > $W/launch_bound.log 2>&1
SOLO_AGAIN=1 NAME=equal CELLS="50us:1" QUAD_CELLS="" MIX_CELLS="50us:1 200us:1 1600us:4" TRANSFORMER="" \
  BUDGET=340 timeout 370 bench/share/sweep.sh $W > $W/equal.log 2>&1
for f in $W/*.gpushared.log; do
  echo "== $(basename $f): grants by mode: $(grep -c 'mode=Some(Together)' $f) together, $(grep -c 'mode=Some(Turns)' $f) turns"
done
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r1.tgz -C $W .
grep -E "aggregate|vs time" $W/launch_bound.log | tail -6
python3 -c "
import json
d=json.load(open('$W/equal_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), round(x.get('max_error_points',0),1)) for j,x in v['jobs'].items()}, round(v['sum'],3))"
