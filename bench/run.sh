#!/bin/bash
# The whole benchmark suite on one GPU machine, each scenario side by side with plain MPS and the
# driver's default time-slicing where it applies, results under OUTPUT_DIR:
#   bench/run.sh OUTPUT_DIR [PART...]        (run as root, from anywhere)
# PARTs, each under ten minutes on an H100, run in the order given (default: 1 to 16):
#   1  hook overhead (launch loop, PyTorch add and MLP loops)
#   2  latency isolation, memory caps
#   3  share accuracy and work conservation, framework compatibility (PyTorch, CuPy, JAX, nvcc)
#   4  aggregate throughput (matmul and small-MLP jobs)
#   5  unified-memory oversubscription
#   6  the GPU side (MPS, NVML, users)
# and the workloads where a token scheduler in its default mode (no MPS; one lease at a time unless
# the GPU has room) may fail, with Unix users gsbench1, gsbench2 (gsbench1-8 in part 10) created
# when missing:
#   7  share sweep: 50 us and 200 us kernels, synchronizing every 1, 4 or no kernels (share/sweep.sh)
#   8  share sweep: 1.6 ms, 20 ms and 100 ms kernels, likewise (100 ms: every kernel or never)
#   9  share sweep: four clients (1.6 ms kernels sync 4, 50 us sync 1); transformer training
#      loops, two under gpushare and two under time-slicing
#  10  launch-bound MNIST-sized MLP jobs: gpushare's default configuration vs time-slicing
#      (throughput/launch_bound.sh)
#  11  latency beside trainers with an `interactive = true` inference client, without and with
#      `queue_ahead = "1ms"`, one lease at a time and with the daemon's default concurrent_leases
#      (latency/run.sh, results in OUTPUT_DIR/interactive)
#  12  restarts: two saturating jobs' shares and a capped process's cap across a restart of
#      gpushared (restart/run.sh)
#  13  every GPU its own token: one saturating job per GPU, with and without gpushare, a
#      process capped on each of two GPUs, and one process driving every GPU (a thread per
#      GPU) alone and beside another client on GPU 0 (multi_gpu/run.sh; needs two or more GPUs)
#  14  decayed fair share: two users' saturating jobs, with fair share off and with one user's
#      past hour of GPU time in the usage database (fair_share/run.sh)
#  15  a lab's mix: seven users' jobs of every kind at once (transformer, CNN, launch-bound MLP,
#      13 ms matmuls never synchronizing, data loading, tiny kernels, inference) in the default
#      configuration, against time-slicing (mixed/run.sh)
#  16  other frameworks' training loops: two JAX transformer encoders, then two CuPy loops, then
#      two PyTorch CNN loops whose step is one CUDA graph, under gpushare (0.75 / 0.25) and
#      time-sliced (share/sweep.sh with LOOP=jax, LOOP=cupy and LOOP=graphed)
# and, for the table at a glance in README.md (each under ten minutes; with part 13 on a machine
# of two GPUs, the workloads of every row of that table):
#  17  shares: pairs of 50 us kernels synchronizing after each, 4096² matmuls (about 200 us)
#      and 8192² ones (about 1.6 ms) synchronizing every 4, 20 ms kernels never synchronizing;
#      four clients of 50 us kernels; two transformer training loops, under gpushare and
#      time-sliced (share/sweep.sh, results as sweep_table); every solo phase runs before and
#      after the shared ones it measures (the host's speed drifts, and jobs that synchronize
#      often, or a training loop, are bound by it)
#  18  8 launch-bound MLP jobs of 8 users against time-slicing (two rounds); the interactive
#      inference client beside three trainers; 4 matmul and 4 small-MLP loops under plain MPS
#      and under gpushare with MPS (throughput/run.sh)
# and workloads beyond that table:
#  19  clients of equal requests (0.5 / 0.5) of 50 us kernels synchronizing after each and of
#      1.6 ms kernels synchronizing every 4, under gpushare and time-sliced (share/sweep.sh,
#      results as sweep_equal)
#  20  kernels of two sizes in one queue (a 20 ms kernel every 200 of 50 us synchronizing after
#      each, every 50 of 200 us never synchronizing); the transformer loop through
#      torch.compile, under gpushare and time-sliced (results as sweep_mixed_sizes)
#  21  clients of equal requests where running together pays: the transformer loop, under
#      gpushare and time-sliced; 200 us kernels synchronizing after each beside a light job
#      (50 us kernels, 0.5 ms of host work after each synchronize); 1.6 ms kernels never
#      synchronizing (results as sweep_equal_together)
#  22  a randomized soak: for each seed of SOAK_SEEDS [1 2 3], 2-8 clients of random requests,
#      limits and classes, of several users, with 1-2 processes each drawn from a library of
#      workloads (kernels of 20 us-50 ms, CUDA graphs, host-bound and launch-bound training
#      loops, bursty jobs, inference), coming and going, and share changes at run time: 3 minutes
#      under gpushare, 40 s time-sliced, each client's got against its due share per 5 s window
#      (soak/run.sh, one step of about 4.5 minutes per seed; results in OUTPUT_DIR/soak, its own
#      summary.md and got_vs_due.png)
# After the parts it writes OUTPUT_DIR/summary.md (markdown tables) and, where matplotlib is
# installed, OUTPUT_DIR/summary.png; `python3 bench/report.py OUTPUT_DIR` makes them again
# elsewhere. Builds nothing: gpushared, gpushare and libgpushare.so come prebuilt from $TARGET
# (default target/release). Never changes the GPU's settings; managed memory stays below what
# the card has free.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: bench/run.sh OUTPUT_DIR [PART...]}
shift
parts=${*:-1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export TARGET=${TARGET:-$here/../target/release}
cd "$here/.."
step() { # NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  echo "== $name" >&2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.stdout" 2>"$out/$name.stderr"
  echo "{\"step\":\"$name\",\"rc\":$?,\"seconds\":$((SECONDS - t0))}" >>"$out/steps.jsonl"
}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv,noheader
  uname -r
  python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null
} >"$out/device.txt"
for part in $parts; do
  case $part in
    1) step hook_overhead 560 "$here/hook_overhead/run.sh" "$out" ;;
    2) step latency 400 "$here/latency/run.sh" "$out"
       step caps 150 "$here/caps/run.sh" "$out" ;;
    3) step share 400 "$here/share/run.sh" "$out"
       step hook_compat 150 "$here/hook_compat/run.sh" "$out" ;;
    4) step throughput 560 "$here/throughput/run.sh" "$out" ;;
    5) step oversubscribe 400 "$here/oversubscribe/run.sh" "$out" ;;
    6) GPUSHARE_BIN=$TARGET step gpu_side 400 bash -c "'$here/gpu_side/run.sh' > '$out/gpu_side.jsonl'" ;;
    7) NAME=sweep_small CELLS="50us:1 50us:4 50us:0 200us:1 200us:4 200us:0" QUAD_CELLS="" TRANSFORMER="" \
         BUDGET=420 step sweep_small 500 "$here/share/sweep.sh" "$out" ;;
    8) NAME=sweep_large CELLS="1600us:1 1600us:4 1600us:0 20ms:1 20ms:4 20ms:0 100ms:1 100ms:0" QUAD_CELLS="" \
         TRANSFORMER="" BUDGET=520 step sweep_large 580 "$here/share/sweep.sh" "$out" ;;
    9) NAME=sweep_quad CELLS="" QUAD_CELLS="1600us:4 50us:1" TRANSFORMER="gpushare timeslice" \
         BUDGET=420 step sweep_quad 500 "$here/share/sweep.sh" "$out" ;;
    10) BUDGET=420 step launch_bound 500 "$here/throughput/launch_bound.sh" "$out" ;;
    11) PHASES="solo gpushare_solo timeslice gpushare gpushare_interactive gpushare_interactive_q gpushare_default gpushare_interactive_default" \
          step latency_interactive 400 "$here/latency/run.sh" "$out/interactive" ;;
    12) step restart 200 "$here/restart/run.sh" "$out" ;;
    13) step multi_gpu 200 "$here/multi_gpu/run.sh" "$out" ;;
    14) step fair_share 200 "$here/fair_share/run.sh" "$out" ;;
    15) BUDGET=500 step mixed 560 "$here/mixed/run.sh" "$out" ;;
    16) NAME=sweep_jax LOOP=jax TF_STARTUP=30 CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice" \
          BUDGET=260 step sweep_jax 320 "$here/share/sweep.sh" "$out"
        NAME=sweep_cupy LOOP=cupy CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice" \
          BUDGET=200 step sweep_cupy 260 "$here/share/sweep.sh" "$out"
        NAME=sweep_graphed LOOP=graphed TF_STARTUP=20 CELLS="" QUAD_CELLS="" TRANSFORMER="gpushare timeslice" \
          BUDGET=150 step sweep_graphed 200 "$here/share/sweep.sh" "$out" ;;
    17) NAME=sweep_table CELLS="50us:1 200us:4 1600us:4 20ms:0" QUAD_CELLS="50us:1" SOLO_AGAIN=1 \
          TRANSFORMER="gpushare solo timeslice solo" BUDGET=540 step sweep_table 590 "$here/share/sweep.sh" "$out" ;;
    18) ROUNDS=2 MODES="timeslice gpushare_users" BUDGET=240 step launch_bound 280 \
          "$here/throughput/launch_bound.sh" "$out"
        PHASES="solo timeslice gpushare_interactive_default" \
          step latency_interactive 150 "$here/latency/run.sh" "$out/interactive"
        MODES="mps gpushare_mps_concurrent" COUNTS=4 step throughput 200 "$here/throughput/run.sh" "$out" ;;
    19) NAME=sweep_equal CELLS="" QUAD_CELLS="" MIX_CELLS="50us:1 1600us:4" TIMESLICE_CELLS="50us:1 1600us:4" \
          SOLO_AGAIN=1 TRANSFORMER="" BUDGET=420 step sweep_equal 480 "$here/share/sweep.sh" "$out" ;;
    20) NAME=sweep_mixed_sizes CELLS="50us:1,big=20ms/200 200us:0,big=20ms/50" QUAD_CELLS="" SOLO_AGAIN=1 \
          LOOP=compiled TF_STARTUP=40 TRANSFORMER="gpushare timeslice solo" BUDGET=540 \
          step sweep_mixed_sizes 590 "$here/share/sweep.sh" "$out" ;;
    21) NAME=sweep_equal_together CELLS="" QUAD_CELLS="" MIX_CELLS="200us:1+50us:1:500 1600us:0" \
          SOLO_AGAIN=1 TRANSFORMER="gpushare timeslice solo" LOOP_REQUESTS=0.5/0.5 BUDGET=480 \
          step sweep_equal_together 540 "$here/share/sweep.sh" "$out" ;;
    22) for seed in ${SOAK_SEEDS:-1 2 3}; do
          step "soak_seed$seed" $((${SOAK_SECONDS:-180} + ${SOAK_TIMESLICE_SECONDS:-40} + 180)) \
            "$here/soak/run.sh" "$out/soak" "$seed"
        done ;;
    *) echo "bench/run.sh: no part $part" >&2; exit 2 ;;
  esac
done
python3 "$here/report.py" "$out" || echo "bench/run.sh: report failed" >&2
