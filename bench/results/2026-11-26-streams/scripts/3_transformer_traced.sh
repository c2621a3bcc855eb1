#!/bin/bash
# The transformer pair once more, the daemon traced (.devbase/cur): solo, gpushare, solo; what
# each process held, second by second, beside what it made of it.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/cur/commit.txt $W/commit.txt
DAEMON_LOG=trace SPAN=25 TARGET=$B/cur NAME=tft CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare solo" \
  BUDGET=200 bench/share/sweep.sh $W > $W/tft.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r3.tgz -C $W .
grep -E "==|solo:|share|sum" $W/tft.log
