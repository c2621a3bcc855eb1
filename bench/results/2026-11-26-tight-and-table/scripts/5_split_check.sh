#!/bin/bash
# The hook with its pacing module split into three files (2f96488, .devbase/final; behaviour
# unchanged): framework results with and without the hook, and two cells of the share sweep.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/final/commit.txt $W/commit.txt
TARGET=$B/final bench/hook_compat/run.sh $W/compat > $W/compat.log 2>&1
python3 -c "
import json; d=json.load(open('$W/compat/hook_compat_summary.json'))
for k,v in d.items(): print(k, 'identical' if v['identical'] else 'DIFFERENT', v['hook'].get('error',''))"
TARGET=$B/final NAME=cells CELLS="50us:1 1600us:0" QUAD_CELLS="" TRANSFORMER="" BUDGET=300 \
  bench/share/sweep.sh $W > $W/cells.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r5.tgz -C $W .
python3 -c "
import json; d=json.load(open('$W/cells_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), x.get('due')) for j,x in v['jobs'].items()}, 'sum', round(v['sum'],3))"
