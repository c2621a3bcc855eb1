#!/bin/bash
# The small-MLP loops under plain MPS and under gpushare with MPS (4 at once), three rounds of
# bench/throughput/run.sh alternating the two, with the build in .devbase/head; the hooked
# jobs' counters on stderr (GPUSHARE_STATS=1).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head GPUSHARE_STATS=1
for r in 1 2 3; do
  WORKLOADS=mlp MODES="mps gpushare_mps_concurrent" COUNTS=4 timeout 150 bench/throughput/run.sh $W/round$r > $W/round$r.log 2>&1
done
xz -T4 $W/*/*.gpushared.log 2>/dev/null; tar czf $OUT/r5.tgz -C $W .
for r in 1 2 3; do python3 -c "
import json,sys; d=json.load(open('$W/round$r/throughput_summary.json'))
print('round $r', 'solo %.0f' % d['solo_rate']['mlp'], {k: round(v['total_rate']) for k,v in d.items() if k!='solo_rate'}, 'vs mps %.3f' % d['mlp.gpushare_mps_concurrent.n4']['vs_mps'])"; done
grep -h "stats" $W/round1.log | head -4
