#!/bin/bash
# Memory caps on a real GPU: four processes with caps of 2, 4, 6 and 8 GiB (20 GiB together, less
# than the card) each fill their cap with PyTorch and must get torch.cuda.OutOfMemoryError at
# it, at the same time, while a neighbour process with a 16 GiB cap allocates 12 GiB and trains
# undisturbed:   bench/caps/run.sh [OUTPUT_DIR]
# Needs python3 with torch; gpushared and libgpushare.so prebuilt in $TARGET (default
# target/release). The GPU's settings are untouched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
outdir=${1:-${OUT:-$here}}
out=$outdir/caps.jsonl
mkdir -p "$outdir"; : >"$out"
{
  gpu_toml false
  for g in 2 4 6 8 16; do printf '[clients.cap%s]\nmemory = "%sGiB"\nusers = ["*"]\n' "$g" "$g"; done
} >"$work/gpushare.toml"
DAEMON_LOG=info gpushared_start "$work/gpushare.toml" "$work/gpushared.log" || exit 1
export GPUSHARE_SOCKET=$work/run/gpushare.sock
hooked() { local client=$1; shift; GPUSHARE_CLIENT=$client LD_PRELOAD=$target/libgpushare.so "$@"; }
hooked cap16 python3 "$here/neighbour.py" 12 25 >"$work/neighbour.out" 2>&1 &
n=$!
sleep 8
pids=()
for g in 2 4 6 8; do
  hooked cap$g python3 "$root/bench/hook_overhead/torch_bench.py" cap "cap$g" >"$work/cap$g.out" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}" "$n"
for f in "$work"/cap*.out "$work/neighbour.out"; do grep '^{' "$f" >>"$out" || { echo "# $(basename "$f"): no result"; sed 's/^/#   /' "$f"; } >>"$out"; done
python3 - "$out" <<'PY' | tee "$outdir/caps_summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
out = {}
for r in rows:
    if r["bench"] == "torch_cap":
        cap = int(r["label"][3:]) << 30
        out[r["label"]] = {"cap": cap, "reached": r["bytes_reached"], "at_cap": r["bytes_reached"] == cap,
                           "oom": r["oom"][:80], "total_seen": r["mem_get_info_before"][1]}
    else:
        out["neighbour"] = {"steps": r["steps"], "error": r["error"], "allocated_gib": r["allocated_gib"]}
print(json.dumps(out, indent=1))
PY
echo "# gpushared log" >>"$out"; sed 's/^/#   /' "$work/gpushared.log" | tail -20 >>"$out"
