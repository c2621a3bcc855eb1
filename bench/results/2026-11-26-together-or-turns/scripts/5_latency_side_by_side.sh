#!/bin/bash
# The inference client beside three trainers without MPS (alone, time-sliced, gpushare with the
# inference client batch class and interactive) with this build (.devbase/head), then the same
# with the build before leases could take turns by measured progress (.devbase/old).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; cp $B/old/commit.txt $W/commit_old.txt; nvidia-smi -L > $W/gpu.txt
for build in head old; do
  TARGET=$B/$build PHASES="solo timeslice gpushare_default gpushare_interactive_default" timeout 260 \
    bench/latency/run.sh $W/$build > $W/$build.log 2>&1
done
xz -T4 $W/*/*.gpushared.log $W/*/latency.jsonl 2>/dev/null; tar czf $OUT/r5.tgz -C $W .
for build in head old; do
python3 -c "
import json
d=json.load(open('$W/$build/latency_summary.json'))
for k,v in d.items():
  print('$build', k, {x:(round(y,3) if isinstance(y,float) else y) for x,y in v.items() if x in ('p50_ms','p99_ms','p99_vs_solo','trainer_iters_per_s')})"
done
