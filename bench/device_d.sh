#!/bin/bash
# One device session, part D: shares and launch overhead with lease extension.
#   bench/device_d.sh OUT_DIR        (TARGET: where gpushared, gpushare and libgpushare.so are)
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?output directory}
mkdir -p "$out"
export TARGET=${TARGET:-$here/../target/release}
echo "== share"; SPAN=15 timeout 200 "$here/share/run.sh" "$out"
echo "== hook_overhead"; ROUNDS=8 LAUNCHES=1000000 ITERS=100000 timeout 340 "$here/hook_overhead/run.sh" "$out/hook_overhead.jsonl"
python3 - "$out/hook_overhead.jsonl" <<'PY' | tee "$out/hook_overhead_summary.json"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
out = {}
for bench, key in (("launch_loop", "ns_per_launch"), ("torch_add", "us_per_iter")):
    plain = [r[key] for r in rows if r.get("bench") == bench and r["label"].startswith("plain.")]
    hook = [r[key] for r in rows if r.get("bench") == bench and r["label"].startswith("hook.")]
    pairs = [h / p for p, h in zip(plain, hook)]
    out[bench] = {"rounds": len(pairs), "plain_median": statistics.median(plain), "hook_median": statistics.median(hook),
                  "median_ratio": statistics.median(pairs), "ratios": [round(x, 3) for x in pairs]}
print(json.dumps(out, indent=1))
PY
