#!/bin/bash
# bench/hook_compat again (the PyTorch cases share one set-up since); then under MPS, the 4
# small-MLP jobs, plain MPS against gpushare under MPS, two rounds, with the hook's counters
# (GPUSHARE_STATS=1, on stderr: r1.log, r2.log). Builds: .devbase/new2.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/new2/commit.txt $W/new2_commit.txt
TARGET=$B/new2 bench/hook_compat/run.sh $W/compat > $W/compat.log 2>&1
python3 -c "
import json; d=json.load(open('$W/compat/hook_compat_summary.json'))
for k,v in d.items(): print(k, 'identical' if v['identical'] else 'DIFFERENT', v['hook'].get('error',''))"
export GPUSHARE_STATS=1
for r in 1 2; do
  mkdir -p $W/r$r
  TARGET=$B/new2 MODES="mps gpushare_mps_concurrent" COUNTS="4" WORKLOADS="mlp" \
    bench/throughput/run.sh $W/r$r > $W/r$r.log 2>&1
  python3 -c "
import json; d=json.load(open('$W/r$r/throughput_summary.json'))
print('round $r', {k: round(v.get('vs_mps', 0), 3) for k, v in d.items() if isinstance(v, dict) and 'vs_mps' in v},
      {k: round(v.get('total_rate', 0), 1) for k, v in d.items() if isinstance(v, dict) and 'total_rate' in v})"
done
grep -h "gpushare: stats" $W/r1.log | head -4
tar czf $OUT/r10.tgz -C $W .
