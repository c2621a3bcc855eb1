#!/bin/bash
# The host-bound cells of call 10 again on the same machine (.devbase/new), each solo phase run
# again after the shared ones (SOLO_AGAIN), and the transformer pair between solo phases.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/new/commit.txt $W/commit.txt
SOLO_AGAIN=1 TARGET=$B/new NAME=again CELLS="50us:1" QUAD_CELLS="50us:1" TRANSFORMER="gpushare solo timeslice solo" \
  BUDGET=330 bench/share/sweep.sh $W > $W/again.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r11.tgz -C $W .
grep -E "==|solo:|share|sum" $W/again.log
