#!/bin/bash
# The inference client (interactive = true) beside three trainers, p99 against its solo p99:
# the final build (.devbase/new, latency_new) and the build before (.devbase/base, latency_base),
# each with its own solo and time-sliced phases; then the transformer pair twice more each,
# alternating, solo phases among them.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in base new; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
for b in new base; do
  TARGET=$B/$b PHASES="solo timeslice gpushare_interactive_default gpushare_interactive" \
    bench/latency/run.sh $W/latency_$b > $W/latency_$b.log 2>&1
done
ALT_TARGET=$B/base TARGET=$B/new NAME=tf CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare_alt gpushare solo gpushare gpushare_alt" BUDGET=200 bench/share/sweep.sh $W > $W/tf.log 2>&1
xz -T4 $W/*.gpushared.log $W/*/*.gpushared.log 2>/dev/null; tar czf $OUT/r6.tgz -C $W .
