#!/bin/bash
# training loops in JAX and CuPy (share/framework_job.py) alone, as a pair under gpushared
# (requests 0.75 / 0.25, the build in .devbase/new) and time-sliced
set -u
B=$PWD/.devbase; N=$B/new; W=$OUT
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/commit.txt
python3 -c "import jax, cupy; print('jax', jax.__version__, 'cupy', cupy.__version__)" > $W/versions.txt 2>&1
TARGET=$N NAME=jax LOOP=jax TF_STARTUP=30 CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice" BUDGET=260 bench/share/sweep.sh $W > $W/jax.log 2>&1
TARGET=$N NAME=cupy LOOP=cupy CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice" BUDGET=200 bench/share/sweep.sh $W > $W/cupy.log 2>&1
