#!/bin/bash
# the 1600us:0 pair traced (new, base, new), launch-bound and latency with new
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; mkdir -p $W
nvidia-smi -L > $W/gpu.txt; cp $B/commit.txt $W/base_commit.txt; cp $N/commit.txt $W/new_commit.txt
t0=$SECONDS
for r in c1:$N c2:$B c3:$N; do
  name=${r%%:*}; dir=${r#*:}
  DAEMON_LOG=trace TARGET=$dir CELLS="1600us:0" QUAD_CELLS="" TRANSFORMER="" NAME=$name BUDGET=100 bench/share/sweep.sh $W/$name > $W/$name.log 2>&1
  echo "$name done $((SECONDS-t0))" >> $W/times.txt
done
TARGET=$N STEPS=2000 ROUNDS=1 STARTUP=14 BUDGET=110 MODES="timeslice gpushare" bench/throughput/launch_bound.sh $W/lb > $W/lb.log 2>&1
echo "lb done $((SECONDS-t0))" >> $W/times.txt
TARGET=$N PHASES="solo timeslice gpushare_interactive_default" bench/latency/run.sh $W/lat > $W/lat.log 2>&1
echo "lat done $((SECONDS-t0))" >> $W/times.txt
for f in $W/c*/*.gpushared.log; do xz -T4 $f; done
tar czf $OUT/c.tgz -C $W .
