#!/bin/bash
# Hook overhead and memory cap on a real GPU. Run from the repository root:
#   bench/hook_overhead/run.sh [OUTPUT_DIR]
# Writes hook_overhead.jsonl and hook_overhead_summary.json there.
#
# Overhead is measured in alternating rounds of fresh processes, the order rotating from round
# to round (so that no variant always runs first after an idle GPU), optionally pinned to the
# CPUs in PIN (taskset): an empty-kernel launch loop (1e6 launches, static cudart, which resolves the
# driver through cuGetProcAddress) plain, under the hook attached to a daemon (token held), and
# under the hook with no daemon; PyTorch's launch-bound loops (a tensor add, a small-MLP training
# step) plain and under the hook. The summary gives the median of the per-round ratios and a
# bootstrap 95% interval of that median. The hook's own cost per launch, free of the GPU's
# noise, is measured against the test double libcuda.so.1 (tests/fakes/fake_cuda.c).
#
# Needs nvcc, gcc and python3 with torch; gpushared and libgpushare.so prebuilt in $TARGET
# (default target/release). Starts its own gpushared (--bus none, no NVML, the GPU's compute
# mode untouched) on a private socket.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${TARGET:-$root/target/release}
outdir=${1:-${OUT:-$here}}
out=$outdir/hook_overhead.jsonl
rounds=${ROUNDS:-8}
launches=${LAUNCHES:-1000000}
iters=${ITERS:-100000}
mlp_iters=${MLP_ITERS:-1500}
cap=${CAP:-4GiB}
pin=${PIN:-}
hook="$target/libgpushare.so"
gpushared="$target/gpushared"
for f in "$hook" "$gpushared"; do
  [[ -f $f ]] || { echo "missing $f (cargo build --release --workspace)" >&2; exit 1; }
done
mkdir -p "$outdir"; : >"$out"

work=$(mktemp -d)
daemon=""
cleanup() {
  [[ -n $daemon ]] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/gpushare.toml" <<TOML
[daemon]
quantum = "20ms"
[gpu]
nvml = false
set_compute_mode = false
[defaults]
memory = "unlimited"
[clients.capped]
memory = "$cap"
users = ["$(id -u)"]
TOML
"$gpushared" --config "$work/gpushare.toml" --socket-dir "$work/run" --bus none --log warn \
  2>"$work/gpushared.log" &
daemon=$!
for _ in $(seq 100); do [[ -S $work/run/gpushare.sock ]] && break; sleep 0.1; done
[[ -S $work/run/gpushare.sock ]] || { cat "$work/gpushared.log" >&2; exit 1; }
export GPUSHARE_SOCKET=$work/run/gpushare.sock

nvcc -O2 -o "$work/launch_loop" "$here/launch_loop.cu"
gcc -O1 -shared -fPIC -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic -o "$work/libcuda.so.1" \
  "$root/tests/fakes/fake_cuda.c" -lpthread
gcc -O2 -o "$work/wrapper_cost" "$here/wrapper_cost.c" -ldl

pinned() { if [[ -n $pin ]]; then taskset -c "$pin" "$@"; else "$@"; fi; }
hooked() { LD_PRELOAD="$hook" pinned "$@"; }
undaemoned() { GPUSHARE_SOCKET=$work/none.sock LD_PRELOAD="$hook" pinned "$@" 2>/dev/null; }

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/# gpu: /'
  echo "# $(date -u +%FT%TZ) rounds=$rounds pinned to CPUs ${pin:-(any)}, clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
} >>"$out"

# The hook's own cost per launch, against the test double (no GPU involved).
for r in $(seq 5); do
  LD_LIBRARY_PATH=$work pinned "$work/wrapper_cost" 10000000 "plain.$r" >>"$out"
  LD_LIBRARY_PATH=$work hooked "$work/wrapper_cost" 10000000 "hook.$r" >>"$out"
done

# Round r runs the variants starting from the (r mod count)-th.
rotated() { local r=$1; shift; local n=$#; local i; for i in $(seq 0 $((n - 1))); do
  local k=$(( (r + i) % n + 1 )); echo "${!k}"; done; }
for r in $(seq "$rounds"); do
  for v in $(rotated "$r" plain hook nodaemon); do
    case $v in
      plain) pinned "$work/launch_loop" "$launches" "plain.$r" ;;
      hook) hooked "$work/launch_loop" "$launches" "hook.$r" ;;
      nodaemon) undaemoned "$work/launch_loop" "$launches" "nodaemon.$r" ;;
    esac >>"$out"
  done
done
for r in $(seq "$rounds"); do
  for v in $(rotated "$r" plain hook); do
    case $v in
      plain) pinned python3 "$here/torch_bench.py" add "$iters" "plain.$r"
             pinned python3 "$here/torch_bench.py" mlp "$mlp_iters" "plain.$r" ;;
      hook) hooked python3 "$here/torch_bench.py" add "$iters" "hook.$r"
            hooked python3 "$here/torch_bench.py" mlp "$mlp_iters" "hook.$r" ;;
    esac >>"$out"
  done
done

# The cap: PyTorch must stop at $cap with OutOfMemoryError, and mem_get_info must show it.
GPUSHARE_CLIENT=capped hooked python3 "$here/torch_bench.py" cap "hook.capped.$cap" >>"$out"
# The same with expandable segments (cuMemCreate + cuMemMap).
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True GPUSHARE_CLIENT=capped \
  hooked python3 "$here/torch_bench.py" cap "hook.capped.expandable.$cap" >>"$out"

echo "# gpushared log:" >>"$out"
sed 's/^/#   /' "$work/gpushared.log" >>"$out"

python3 "$here/summary.py" "$out" | tee "$outdir/hook_overhead_summary.json"
