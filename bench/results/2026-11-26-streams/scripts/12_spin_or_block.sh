#!/bin/bash
# Waits for a grant that spin (.devbase/new, cd38933: spinning with yields for up to 100 ms, the
# default) against waits that block at once (.devbase/block's hook, as _alt): the transformer
# pair between solo phases, the builds alternating, then the 50 us pair.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
A=/tmp/block_full; rm -rf $A; mkdir -p $A; cp $B/new/gpushared $B/new/gpushare $B/block/libgpushare.so $A/
nvidia-smi -L > $W/gpu.txt; for b in new block; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
ALT_TARGET=$A TARGET=$B/new NAME=tf CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt solo gpushare_alt gpushare solo" BUDGET=330 \
  bench/share/sweep.sh $W > $W/tf.log 2>&1
SOLO_AGAIN=1 ALT_TARGET=$A TARGET=$B/new NAME=cell CELLS="50us:1" QUAD_CELLS="" TRANSFORMER="" BUDGET=200 \
  bench/share/sweep.sh $W > $W/cell.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r12.tgz -C $W .
grep -E "==|solo:|share|sum" $W/tf.log $W/cell.log
python3 -c "
import json
for n in ('tf','cell'):
  d=json.load(open('$W/'+n+'_summary.json'))
  print(n, {k:[round(r,1) for r in v.get('rates',[v['rate']])] for k,v in d['solo'].items()})
  for k,v in d.items():
    if isinstance(v,dict) and 'jobs' in v: print(k, {j:round(x['share'],3) for j,x in v['jobs'].items()}, round(v['sum'],3))"
