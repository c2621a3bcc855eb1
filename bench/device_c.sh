#!/bin/bash
# One device session, part C: memory caps side by side with a neighbour, and the launch overhead
# over ten alternating rounds.
#   bench/device_c.sh OUT_DIR        (TARGET: where gpushared, gpushare and libgpushare.so are)
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?output directory}
mkdir -p "$out"
export TARGET=${TARGET:-$here/../target/release}
echo "== caps"; timeout 150 "$here/caps/run.sh" "$out"
echo "== hook_overhead"; ROUNDS=10 LAUNCHES=1000000 ITERS=100000 timeout 400 "$here/hook_overhead/run.sh" "$out/hook_overhead.jsonl"
python3 - "$out/hook_overhead.jsonl" <<'PY' | tee "$out/hook_overhead_summary.json"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and '"launch_loop"' in l]
plain = [r["ns_per_launch"] for r in rows if r["label"].startswith("plain.")]
hook = [r["ns_per_launch"] for r in rows if r["label"].startswith("hook.")]
pairs = [h / p for p, h in zip(plain, hook)]
print(json.dumps({"rounds": len(pairs), "plain_median_ns": statistics.median(plain),
                  "hook_median_ns": statistics.median(hook),
                  "median_ratio": statistics.median(pairs), "min_ratio_of_mins": min(hook) / min(plain),
                  "ratios": [round(x, 3) for x in pairs]}, indent=1))
PY
