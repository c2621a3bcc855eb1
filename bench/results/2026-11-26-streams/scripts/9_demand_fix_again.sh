#!/bin/bash
# .devbase/new against .devbase/cur once more: the inference client as a batch client beside
# three trainers, the builds alternating (new, cur, new, cur), then the CuPy loop pair 0.75 /
# 0.25 (measured light in its start-up, then probed) with both builds.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in cur new; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
for n in new1 cur1 new2 cur2; do
  b=${n%?}; mkdir -p $W/lat_$n
  TARGET=$B/$b PHASES="solo gpushare_default" bench/latency/run.sh $W/lat_$n > $W/lat_$n.log 2>&1
  python3 -c "
import json; d=json.load(open('$W/lat_$n/latency_summary.json'))
for k,v in d.items(): print('$n', k, v.get('p50_ms') and round(v['p50_ms'],2), v.get('p99_ms') and round(v['p99_ms'],2), v.get('trainer_iters_per_s'), v.get('error',''))"
done
TARGET=$B/new ALT_TARGET=$B/cur NAME=cupy LOOP=cupy TF_STARTUP=8 CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt solo" BUDGET=240 bench/share/sweep.sh $W > $W/cupy.log 2>&1
xz -T4 $W/*/*.gpushared.log $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r9.tgz -C $W .
grep -E "==|solo:|share|sum" $W/cupy.log
