#!/bin/bash
# The batch-class inference client beside three trainers (gpushare without MPS, default
# configuration), alternating this build (.devbase/head) and the build before (.devbase/old)
# twice each: does the batch class's p99 differ between the builds, or with the host?
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; cp $B/old/commit.txt $W/commit_old.txt; nvidia-smi -L > $W/gpu.txt
for run in head.1 old.1 head.2 old.2; do
  TARGET=$B/${run%.*} PHASES="gpushare_default" timeout 100 bench/latency/run.sh $W/$run > $W/$run.log 2>&1
done
xz -T4 $W/*/*.gpushared.log $W/*/latency.jsonl 2>/dev/null; tar czf $OUT/r6.tgz -C $W .
for run in head.1 old.1 head.2 old.2; do
python3 -c "
import json
d=json.load(open('$W/$run/latency_summary.json'))
for k,v in d.items():
  print('$run', k, {x:(round(y,3) if isinstance(y,float) else y) for x,y in v.items() if x in ('p50_ms','p99_ms','trainer_iters_per_s')})"
done
