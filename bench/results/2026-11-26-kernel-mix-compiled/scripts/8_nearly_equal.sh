#!/bin/bash
# The equal-request pairs of calls 6 and 7 with requests 0.5 / 0.49 (weights 2% apart: the
# scheduler's rules for unequal weights, demands probed), with the build in .devbase/head.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
MIX_REQUESTS=0.5/0.49 SOLO_AGAIN=1 TARGET=$B/head NAME=near CELLS="" QUAD_CELLS="" MIX_CELLS="50us:1 1600us:4" \
  TRANSFORMER="" BUDGET=280 timeout 300 bench/share/sweep.sh $W > $W/near.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r8.tgz -C $W .
grep -E "==|solo:|share|sum" $W/near.log | grep -v '"'
python3 -c "
import json
d=json.load(open('$W/near_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), x.get('due')) for j,x in v['jobs'].items()}, round(v['sum'],3))"
