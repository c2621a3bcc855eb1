#!/bin/bash
# One device session, part B: share accuracy and hook overhead.
#   bench/device_b.sh OUT_DIR        (TARGET: where gpushared, gpushare and libgpushare.so are)
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?output directory}
mkdir -p "$out"
export TARGET=${TARGET:-$here/../target/release}
{ nvidia-smi --query-gpu=name,driver_version,compute_mode,memory.total,memory.used --format=csv; date -u; } >"$out/device.txt" 2>&1
echo "== share"; timeout 220 "$here/share/run.sh" "$out"
echo "== hook_overhead"; ROUNDS=5 LAUNCHES=1000000 ITERS=100000 timeout 300 "$here/hook_overhead/run.sh" "$out/hook_overhead.jsonl"
grep -v '^#' "$out/hook_overhead.jsonl" | grep launch_loop
