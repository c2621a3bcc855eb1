#!/bin/bash
# What a lone transformer loop makes under the hook without a daemon (hooked) and alone under
# gpushared (gpushare_alone), between solo phases (.devbase/cur), the daemon traced.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/cur/commit.txt $W/commit.txt
DAEMON_LOG=trace TARGET=$B/cur NAME=alone CELLS="" QUAD_CELLS="" \
  TRANSFORMER="hooked gpushare_alone solo hooked gpushare_alone solo" \
  BUDGET=330 bench/share/sweep.sh $W > $W/alone.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r4.tgz -C $W .
grep -E "==|solo:|share|sum" $W/alone.log; cat $W/alone.stats.txt | cut -c1-400
