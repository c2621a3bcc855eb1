#!/bin/bash
# Hook overhead and memory cap on a real GPU. Run from the repository root:
#   bench/hook_overhead/run.sh [OUTPUT.jsonl]
# Needs nvcc and python3 with torch; gpushared and libgpushare.so prebuilt in $TARGET
# (default target/release). Starts its own gpushared (--bus none, no NVML, the GPU's compute
# mode untouched) on a private socket. Prints JSON lines and appends them to OUTPUT.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${TARGET:-$root/target/release}
out=${1:-${OUT:-$here}/hook_overhead.jsonl}
launches=${LAUNCHES:-1000000}
iters=${ITERS:-200000}
cap=${CAP:-4GiB}
hook="$target/libgpushare.so"
gpushared="$target/gpushared"
for f in "$hook" "$gpushared"; do
  [[ -x $f || -f $f ]] || { echo "missing $f (cargo build --release -p gpushare -p gpushare-hook)" >&2; exit 1; }
done

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
client_timeout = "2s"
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

emit() { tee -a "$out"; }
hooked() { LD_PRELOAD="$hook" "$@"; }

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/# gpu: /'
  echo "# $(date -u +%FT%TZ) hook=$hook"
} >>"$out"

for round in $(seq "${ROUNDS:-3}"); do
  "$work/launch_loop" "$launches" "plain.$round" | emit
  hooked "$work/launch_loop" "$launches" "hook.$round" | emit
done
# The hook without a daemon (passthrough) for comparison.
GPUSHARE_SOCKET=$work/none.sock hooked "$work/launch_loop" "$launches" "hook-no-daemon" 2>/dev/null | emit

for round in $(seq "${ROUNDS:-3}"); do
  python3 "$here/torch_bench.py" add "$iters" "plain.$round" | emit
  hooked python3 "$here/torch_bench.py" add "$iters" "hook.$round" | emit
done

# The cap: PyTorch must stop at $cap with OutOfMemoryError, and mem_get_info must show it.
GPUSHARE_CLIENT=capped hooked python3 "$here/torch_bench.py" cap "hook.capped.$cap" | emit
# The same with expandable segments (cuMemCreate + cuMemMap).
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True GPUSHARE_CLIENT=capped \
  hooked python3 "$here/torch_bench.py" cap "hook.capped.expandable.$cap" | emit

echo "# gpushared log:" >>"$out"
sed 's/^/#   /' "$work/gpushared.log" >>"$out"
