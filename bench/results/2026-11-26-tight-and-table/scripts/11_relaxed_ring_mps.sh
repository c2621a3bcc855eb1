#!/bin/bash
# Under MPS every extended lease is relaxed: 4 small-MLP and 4 matmul loops against plain MPS with
# .devbase/final and with the hook of .devbase/ring, two rounds alternating, each with its own
# plain-MPS phase.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
R=/tmp/ring_full; rm -rf $R; mkdir -p $R; cp $B/final/gpushared $B/final/gpushare $B/ring/libgpushare.so $R/
nvidia-smi -L > $W/gpu.txt; for b in final ring; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
for r in 1 2; do for b in ring final; do
  t=$B/final; [ $b = ring ] && t=$R
  TARGET=$t MODES="mps gpushare_mps_concurrent" COUNTS="4" SPAN=8 bench/throughput/run.sh $W/r${r}_$b > $W/r${r}_$b.log 2>&1
  python3 -c "
import json; d=json.load(open('$W/r${r}_$b/throughput_summary.json'))
print('round $r $b', {k: round(v.get('vs_mps', 0), 3) for k, v in d.items() if isinstance(v, dict) and v.get('mode') == 'gpushare_mps_concurrent'})"
done; done
xz -T4 $W/*/*.gpushared.log 2>/dev/null; tar czf $OUT/r11.tgz -C $W .
