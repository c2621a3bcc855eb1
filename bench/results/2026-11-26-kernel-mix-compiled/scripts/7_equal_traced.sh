#!/bin/bash
# Demand estimates where every process weighs the same, the daemon traced (DAEMON_LOG=trace: each
# grant with the process's estimate): 8 launch-bound MLP jobs of 8 users (one round), then pairs
# of equal requests (0.5 / 0.5) of 50 us kernels synchronizing after each and of 1.6 ms kernels
# synchronizing every 4, with the build in .devbase/head.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head DAEMON_LOG=trace
ROUNDS=1 MODES="timeslice gpushare_users" BUDGET=120 timeout 150 bench/throughput/launch_bound.sh $W > $W/launch_bound.log 2>&1
SOLO_AGAIN=1 NAME=equal CELLS="" QUAD_CELLS="" MIX_CELLS="50us:1 1600us:4" TRANSFORMER="" BUDGET=260 \
  timeout 290 bench/share/sweep.sh $W > $W/equal.log 2>&1
for f in $W/*.gpushared.log; do
  echo "== $(basename $f): demand at grants, by session"
  grep ' grant' "$f" | sed -n 's/.*session=\([0-9]*\).*demand=\([^ ]*\).*/\1 \2/p' | python3 -c "
import sys, collections
d = collections.defaultdict(list)
for l in sys.stdin:
    s, v = l.split(); d[s].append(v)
for s, v in sorted(d.items(), key=lambda x: int(x[0])):
    print(s, len(v), 'grants; first', v[:3], 'last', v[-3:])"
done
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r7.tgz -C $W .
grep -E "aggregate|vs time" $W/launch_bound.log | tail -4; grep -E "==|solo:|share|sum" $W/equal.log | grep -v '"'
