#!/bin/bash
# The inference client beside three saturating trainers as a plain (batch) client, the daemon's
# default mode, against the same client interactive and time-slicing (.devbase/cur), the daemon
# traced in the gpushare phases.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/cur/commit.txt $W/commit.txt
DAEMON_LOG=trace TARGET=$B/cur PHASES="solo timeslice gpushare_default gpushare_interactive_default gpushare_default" \
  bench/latency/run.sh $W > $W/latency.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r5.tgz -C $W .
cat $W/latency_summary.json
