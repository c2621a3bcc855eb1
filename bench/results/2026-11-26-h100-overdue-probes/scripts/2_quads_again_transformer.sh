#!/bin/bash
# four clients again, both builds side by side (the new one first), the daemon traced, two
# rounds; then the transformer pair with the new build between solo phases
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/new_commit.txt; cp $B/prev/commit.txt $W/prev_commit.txt
t0=$SECONDS
for r in 1 2; do
  DAEMON_LOG=trace ALT_TARGET=$B/prev TARGET=$N NAME=quad$r CELLS="" QUAD_CELLS="1600us:4 50us:1" TRANSFORMER="" BUDGET=170 bench/share/sweep.sh $W > $W/quad$r.log 2>&1
  xz -T8 $W/quad$r.gpushared.log
  echo "quad$r $((SECONDS-t0))" >> $W/times.txt
done
TARGET=$N NAME=tf CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare solo" BUDGET=120 bench/share/sweep.sh $W > $W/tf.log 2>&1
echo "tf $((SECONDS-t0))" >> $W/times.txt
tar czf $OUT/r2.tgz -C $W .
