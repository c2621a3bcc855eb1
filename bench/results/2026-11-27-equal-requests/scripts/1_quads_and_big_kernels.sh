#!/bin/bash
# Equal requests where they were not measured before: four clients of request 0.25 (50 us kernels
# synchronizing after each, 1.6 ms every 4, 20 ms after each), and pairs of 0.5 / 0.5 with 20 ms
# kernels (synchronizing after each, and never) and a deep queue of 20 ms kernels beside 50 us
# ones synchronizing after each; each solo phase again after.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head DAEMON_LOG=trace
SOLO_AGAIN=1 NAME=equal CELLS="" QUAD_CELLS="50us:1 1600us:4 20ms:1" QUAD_REQUESTS=0.25/0.25/0.25/0.25 \
  MIX_CELLS="20ms:1 20ms:0 20ms:0+50us:1" MIX_REQUESTS=0.5/0.5 TRANSFORMER="" \
  BUDGET=540 timeout 570 bench/share/sweep.sh $W > $W/equal.log 2>&1
for f in $W/*.gpushared.log; do
  echo "== $(basename $f): grants by mode: $(grep -c 'mode=Some(Together)' $f) together, $(grep -c 'mode=Some(Turns)' $f) turns"
done
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r1.tgz -C $W .
python3 -c "
import json
d=json.load(open('$W/equal_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), round(x.get('max_error_points',0),1)) for j,x in v['jobs'].items()}, round(v.get('sum',0),3))"
tail -5 $W/equal.log
