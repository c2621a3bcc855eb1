#!/bin/bash
# Under MPS, 4 small-MLP jobs: plain MPS against gpushare under MPS (a lease per process) with
# .devbase/new2, four rounds, each with its own plain-MPS phase right before.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/new2/commit.txt $W/new2_commit.txt
for r in 1 2 3 4; do
  mkdir -p $W/r$r
  TARGET=$B/new2 MODES="mps gpushare_mps_concurrent" COUNTS="4" WORKLOADS="mlp" \
    bench/throughput/run.sh $W/r$r > $W/r$r.log 2>&1
  python3 -c "
import json; d=json.load(open('$W/r$r/throughput_summary.json'))
print('round $r', {k: round(v.get('vs_mps', 0), 3) for k, v in d.items() if isinstance(v, dict) and 'vs_mps' in v},
      {k: round(v.get('total_rate', 0), 1) for k, v in d.items() if isinstance(v, dict) and 'total_rate' in v})"
done
tar czf $OUT/r9.tgz -C $W .
