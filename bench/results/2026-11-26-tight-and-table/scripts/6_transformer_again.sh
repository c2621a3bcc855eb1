#!/bin/bash
# The transformer pair again with 2f96488 (.devbase/final): two phases under gpushare, one
# time-sliced, and the solo phase before and after (shares against the mean of the two).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/final/commit.txt $W/commit.txt
TARGET=$B/final NAME=tf CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice gpushare solo" BUDGET=420 \
  bench/share/sweep.sh $W > $W/tf.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r6.tgz -C $W .
grep "solo:" $W/tf.log
python3 -c "
import json; d=json.load(open('$W/tf_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), x.get('due'), [round(w,3) for w in x['windows']]) for j,x in v['jobs'].items()}, 'sum', round(v['sum'],3))"
