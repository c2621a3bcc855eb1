#!/bin/bash
# The four-client 50 us cell once more with .devbase/new, the daemon traced: what each process
# held, second by second, beside what it made of it.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $B/new/commit.txt $W/commit.txt
DAEMON_LOG=trace TARGET=$B/new NAME=quad CELLS="" QUAD_CELLS="50us:1" TRANSFORMER="" \
  BUDGET=200 bench/share/sweep.sh $W > $W/quad.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r8.tgz -C $W .
grep -E "==|solo:|share|sum" $W/quad.log; cat $W/quad.stats.txt | cut -c1-330
