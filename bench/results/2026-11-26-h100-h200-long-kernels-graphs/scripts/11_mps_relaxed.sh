#!/bin/bash
# Under MPS, 4 small-MLP jobs: extended leases relaxed under MPS (.devbase/new3) against
# .devbase/new2, three rounds alternating, each with its own plain-MPS phase right before; the
# hook's counters on stderr (GPUSHARE_STATS=1: rN_BUILD.log).
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in new2 new3; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
export GPUSHARE_STATS=1
for r in 1 2 3; do for b in new3 new2; do
  mkdir -p $W/r${r}_$b
  TARGET=$B/$b MODES="mps gpushare_mps_concurrent" COUNTS="4" WORKLOADS="mlp" \
    bench/throughput/run.sh $W/r${r}_$b > $W/r${r}_$b.log 2>&1
  python3 -c "
import json; d=json.load(open('$W/r${r}_$b/throughput_summary.json'))
print('round $r $b', {k: round(v.get('vs_mps', 0), 3) for k, v in d.items() if isinstance(v, dict) and 'vs_mps' in v},
      {k: round(v.get('total_rate', 0), 1) for k, v in d.items() if isinstance(v, dict) and 'total_rate' in v})"
done; done
grep -h "gpushare: stats" $W/r1_new3.log | head -2
tar czf $OUT/r11.tgz -C $W .
