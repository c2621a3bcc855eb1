#!/bin/bash
# The whole benchmark suite on one GPU machine, each scenario side by side with plain MPS and the
# driver's default time-slicing where it applies, results under OUTPUT_DIR:
#   bench/run.sh OUTPUT_DIR [PART...]        (run as root, from anywhere)
# PARTs, each under ten minutes on an H100, run in the order given (default: all of them):
#   1  hook overhead (launch loop, PyTorch add and MLP loops)
#   2  latency isolation, memory caps
#   3  share accuracy and work conservation, framework compatibility (PyTorch, CuPy, JAX, nvcc)
#   4  aggregate throughput (matmul and small-MLP jobs)
#   5  unified-memory oversubscription
#   6  the GPU side (MPS, NVML, users)
# After the parts it writes OUTPUT_DIR/summary.md (markdown tables) and, where matplotlib is
# installed, OUTPUT_DIR/summary.png; `python3 bench/report.py OUTPUT_DIR` makes them again
# elsewhere. Builds nothing: gpushared, gpushare and libgpushare.so come prebuilt from $TARGET
# (default target/release). Never changes the GPU's settings; managed memory stays below what
# the card has free.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: bench/run.sh OUTPUT_DIR [PART...]}
shift
parts=${*:-1 2 3 4 5 6}
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
    *) echo "bench/run.sh: no part $part" >&2; exit 2 ;;
  esac
done
python3 "$here/report.py" "$out" || echo "bench/run.sh: report failed" >&2
