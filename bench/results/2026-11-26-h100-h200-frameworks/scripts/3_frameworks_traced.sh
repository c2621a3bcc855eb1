#!/bin/bash
# call 2 again with the daemon's trace: the CuPy and JAX loops alone, as a pair under gpushared and
# time-sliced
set -u
B=$PWD/.devbase; N=$B/new; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/commit.txt
python3 -c "import jax, cupy; print('jax', jax.__version__, 'cupy', cupy.__version__)" > $W/versions.txt 2>&1
DAEMON_LOG=trace TARGET=$N NAME=cupy LOOP=cupy CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice" BUDGET=200 bench/share/sweep.sh $W > $W/cupy.log 2>&1
tar czf $OUT/r3.tgz -C $W .
DAEMON_LOG=trace TARGET=$N NAME=jax LOOP=jax TF_STARTUP=30 CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice" BUDGET=260 bench/share/sweep.sh $W > $W/jax.log 2>&1
xz -T4 $W/*.gpushared.log; tar czf $OUT/r3.tgz -C $W .
