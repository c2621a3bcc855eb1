#!/bin/bash
# The inference client (interactive = true) beside three trainers: batch holders near an
# interactive client keeping an eighth of queue_ahead queued (.devbase/div8) against a quarter
# (.devbase/new2), two rounds alternating, each run with its own solo and time-sliced phases.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in new2 div8; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
for r in 1 2; do for b in div8 new2; do
  TARGET=$B/$b PHASES="solo timeslice gpushare_interactive_default" \
    bench/latency/run.sh $W/latency_${b}_$r > $W/latency_${b}_$r.log 2>&1
done; done
xz -T4 $W/*/*.gpushared.log 2>/dev/null; tar czf $OUT/r8.tgz -C $W .
for f in $W/latency_*/latency_summary.json; do python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
print(sys.argv[1].split('/')[-2], *['%s p99 %.3f ms %.2fx trainers %.1f' % (k, v['p99_ms'], v['p99_vs_solo'], v['trainer_iters_per_s']) for k,v in d.items() if isinstance(v,dict)], sep='\n  ')" $f; done
