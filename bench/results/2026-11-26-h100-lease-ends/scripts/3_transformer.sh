#!/bin/bash
# The transformer training loop's pair (0.75 / 0.25): queue checks up to 32 launches apart and
# extensions asked ahead (.devbase/new) beside the build before (.devbase/base, the _alt phases),
# each twice, alternating (with the daemon's trace); then the build that also spins waiting for
# a grant (.devbase/spin) beside the build before.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; for b in base new spin; do cp $B/$b/commit.txt $W/${b}_commit.txt; done
DAEMON_LOG=trace ALT_TARGET=$B/base TARGET=$B/new NAME=tf CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt gpushare_alt gpushare" BUDGET=300 bench/share/sweep.sh $W > $W/tf.log 2>&1
ALT_TARGET=$B/base TARGET=$B/spin NAME=tfspin CELLS="" QUAD_CELLS="" \
  TRANSFORMER="gpushare gpushare_alt" BUDGET=160 bench/share/sweep.sh $W > $W/tfspin.log 2>&1
xz -T4 $W/*.gpushared.log; tar czf $OUT/r3.tgz -C $W .
