#!/bin/bash
# One device session, part A: hook correctness across frameworks, hook overhead, share accuracy.
#   bench/device_a.sh OUT_DIR        (TARGET: where gpushared, gpushare and libgpushare.so are)
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?output directory}
mkdir -p "$out"
export TARGET=${TARGET:-$here/../target/release}
{ nvidia-smi --query-gpu=name,driver_version,compute_mode,memory.total,memory.used --format=csv; date -u; } >"$out/device.txt" 2>&1
echo "== hook_compat"; timeout 150 "$here/hook_compat/run.sh" "$out"
echo "== share"; timeout 200 "$here/share/run.sh" "$out"
echo "== hook_overhead"; LAUNCHES=${LAUNCHES:-1000000} ITERS=${ITERS:-100000} timeout 200 "$here/hook_overhead/run.sh" "$out/hook_overhead.jsonl"
grep -v '^#' "$out/hook_overhead.jsonl" | tail -20
