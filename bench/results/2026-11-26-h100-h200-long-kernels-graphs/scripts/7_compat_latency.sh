#!/bin/bash
# Framework results with and without the hook (hook_compat, now with a PyTorch step captured in a
# CUDA graph) with .devbase/new2; then the inference client (interactive = true) beside three
# trainers, .devbase/new2 and .devbase/prev, each with its own solo and time-sliced phases.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in prev new2; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
TARGET=$B/new2 bench/hook_compat/run.sh $W/compat > $W/compat.log 2>&1
for b in new2 prev; do
  TARGET=$B/$b PHASES="solo timeslice gpushare_interactive_default" \
    bench/latency/run.sh $W/latency_$b > $W/latency_$b.log 2>&1
done
xz -T4 $W/*/*.gpushared.log 2>/dev/null; tar czf $OUT/r7.tgz -C $W .
python3 -c "
import json; d=json.load(open('$W/compat/hook_compat_summary.json'))
for k,v in d.items(): print(k, 'identical' if v['identical'] else 'DIFFERENT', v['hook'].get('error',''))"
for b in new2 prev; do tail -15 $W/latency_$b.log; done
