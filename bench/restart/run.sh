#!/bin/bash
# Restarts keep control, on a real GPU: two saturating PyTorch jobs of clients with requests
# 0.75 and 0.25 run for SPAN seconds (default 40); at RESTART_AT (default 15) gpushared is killed
# and started again on the same socket (without systemd: the socket is the daemon's own, so the
# jobs re-attach at their next try, every 250 ms at most). Their shares before and after the
# restart are computed in WINDOW-second windows (default 5) against a solo run in the same
# script. Beside them, a capped process (client cap8, 8 GiB) holds 5 GiB across the restart and
# then asks for 4 GiB more (must fail with OutOfMemoryError: the new daemon counts the 5 GiB)
# and 2 GiB more (must succeed).
#   bench/restart/run.sh [OUTPUT_DIR]
# Needs python3 with torch; gpushared and libgpushare.so prebuilt in $TARGET (default
# target/release). The GPU's settings are untouched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
outdir=${1:-${OUT:-$here}}
out=$outdir/restart.jsonl
span=${SPAN:-40}
restart_at=${RESTART_AT:-15}
window=${WINDOW:-5}
mkdir -p "$outdir"
header >"$out"
job=("python3" "$root/bench/share/matmul_job.py")

# Solo rate, without the hook.
"${job[@]}" ref --phase solo --until "$(at 12)" >>"$out"

{
  echo '[daemon]'
  gpu_toml false
  printf '[clients.a]\nrequest = 0.75\nusers = ["*"]\n[clients.b]\nrequest = 0.25\nusers = ["*"]\n'
  printf '[clients.cap8]\nmemory = "8GiB"\nusers = ["*"]\n'
} >"$work/gpushare.toml"
DAEMON_LOG=info gpushared_start "$work/gpushare.toml" "$outdir/restart.gpushared.log" || exit 1
until=$(at $((span + 3)))
t_restart=$(at $((restart_at + 3)))
pids=()
for c in a b; do
  r=$([[ $c == a ]] && echo 0.75 || echo 0.25)
  env $hook GPUSHARE_CLIENT=$c "${job[@]}" "ref.$c" --phase restart --request "$r" --until "$until" \
    >"$work/job.$c" 2>"$work/job.$c.err" &
  pids+=($!)
done
env $hook GPUSHARE_CLIENT=cap8 python3 "$here/cap_job.py" cap.1 5 4 2 \
  --until "$(at $((restart_at + 10)))" >"$work/cap.1" 2>"$work/cap.1.err" &
pids+=($!)
sleep "$(python3 -c "import time; print(max(0, $t_restart - time.time()))")"
echo "{\"event\": \"restart\", \"t\": $(python3 -c 'import time; print(time.time())')}" >>"$out"
kill -KILL "$daemon"; wait "$daemon" 2>/dev/null; daemon=""
sleep 1
DAEMON_LOG=info gpushared_start "$work/gpushare.toml" "$outdir/restart.gpushared.log" || exit 1
wait "${pids[@]}"
cat "$work"/job.a "$work"/job.b "$work"/cap.1 >>"$out"
for f in "$work"/*.err; do sed "s|^|# $(basename "$f"): |" "$f" | grep -i "gpushare\|error" >>"$out"; done
python3 - "$out" "$window" <<'PY' | tee "$outdir/restart_summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
window = float(sys.argv[2])
def done_at(s, t):
    for (ta, na), (tb, nb) in zip(s, s[1:]):
        if ta <= t <= tb:
            return na + (nb - na) * (t - ta) / (tb - ta) if tb > ta else nb
def rate(s, t0, t1):
    a, b = done_at(s, t0), done_at(s, t1)
    return (b - a) / (t1 - t0) if a is not None and b is not None else None
solo = next(r for r in rows if r.get("phase") == "solo")["samples"]
base = rate(solo, solo[0][0] + 1, solo[-1][0] - 0.5)
jobs = [r for r in rows if r.get("phase") == "restart"]
t_restart = next(r["t"] for r in rows if r.get("event") == "restart")
t0 = max(j["samples"][0][0] for j in jobs) + 2
t1 = min(j["samples"][-1][0] for j in jobs) - 1
out = {"solo_rate": base, "restart_at": t_restart - t0, "windows": []}
t = t0
while t + window <= t1:
    w = {"from_s": round(t - t0, 1), "to_s": round(t + window - t0, 1),
         "restart_inside": t <= t_restart < t + window}
    for j in jobs:
        w[j["name"]] = rate(j["samples"], t, t + window) / base
    out["windows"].append(w)
    t += window
out["caps"] = [r for r in rows if r.get("name", "").startswith("cap.")]
print(json.dumps(out, indent=1))
PY
