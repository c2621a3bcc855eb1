#!/bin/bash
# The inference client (interactive = true) beside three trainers: batch queues beside it held to
# an eighth of queue_ahead and one launch in flight (.devbase/tight) against HEAD (.devbase/base),
# four runs alternating base, tight, tight, base; time-slicing in the first.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in base tight; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
r=0
for b in base tight tight base; do
  r=$((r + 1)); phases="solo gpushare_interactive_default"
  [ $r = 1 ] && phases="solo timeslice gpushare_interactive_default"
  TARGET=$B/$b PHASES="$phases" bench/latency/run.sh $W/r${r}_$b > $W/r${r}_$b.log 2>&1
  python3 -c "
import json; d=json.load(open('$W/r${r}_$b/latency_summary.json'))
print('run $r $b', {k: (round(v.get('p50_ms') or 0, 3), round(v.get('p99_ms') or 0, 3), round(v.get('p99_vs_solo') or 0, 3), v.get('trainer_iters_per_s')) for k, v in d.items()})"
done
xz -T4 $W/*/*.gpushared.log 2>/dev/null; tar czf $OUT/r1.tgz -C $W .
