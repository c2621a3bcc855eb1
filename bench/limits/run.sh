#!/bin/bash
# A client alone at its limit, on a real GPU: what it gets and what the daemon's USED says.
#   bench/limits/run.sh OUTPUT_DIR [TARGET_DIR...]      (as root)
# A saturating bf16 matmul job (bench/share/matmul_job.py, 4096², synchronizing every 4) runs
# alone without the hook (its solo rate), then, for each TARGET_DIR (default $TARGET or
# target/release: gpushared, gpushare and libgpushare.so of one build), alone under a fresh
# daemon as a client of request 0.1 and limit LIMIT [0.4] for SPAN [20] seconds. The daemon's
# status is read SETTLE [5] seconds in and at the end: USED over that stretch is the difference
# of the client's gpu_time_ns over its length, its share the job's rate over the same stretch
# divided by the solo rate. One line per build in OUTPUT_DIR/limits.jsonl and a table on stdout.
# Needs python3 with torch. The GPU's settings are untouched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
outdir=${1:?usage: bench/limits/run.sh OUTPUT_DIR [TARGET_DIR...]}
shift
# shellcheck source=../lib.sh
. "$here/../lib.sh"
builds=("$@")
((${#builds[@]})) || builds=("$target")
limit=${LIMIT:-0.4}
span=${SPAN:-20}
settle=${SETTLE:-5}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
out=$outdir/limits.jsonl
job=$root/bench/share/matmul_job.py
header "limit=$limit span=$span settle=$settle" >"$out"
python3 "$job" solo --phase solo --until "$(at 10)" >"$work/solo.json"

status() {
  "$target/gpushare" --bus none --socket "$work/run/gpushare.sock" --json status
}

for build in "${builds[@]}"; do
  target=$(cd "$build" && pwd)
  hook="LD_PRELOAD=$target/libgpushare.so GPUSHARE_SOCKET=$work/run/gpushare.sock"
  { gpu_toml false; printf '[clients.lim]\nrequest = 0.1\nlimit = %s\nusers = ["*"]\n' "$limit"; } \
    >"$work/gpushare.toml"
  gpushared_start "$work/gpushare.toml" "$outdir/gpushared.log" || continue
  u=$(at "$span")
  env $hook GPUSHARE_CLIENT=lim python3 "$job" lim --phase limit --until "$u" >"$work/lim.json" &
  pid=$!
  sleep "$settle"
  t0=$(date +%s.%N)
  status >"$work/s0.json"
  sleep $((span - settle - 2))
  t1=$(date +%s.%N)
  status >"$work/s1.json"
  wait "$pid"
  gpushared_stop
  python3 - "$work/solo.json" "$work/lim.json" "$work/s0.json" "$work/s1.json" "$t0" "$t1" \
    "$target" "$limit" >>"$out" <<'EOF'
import json, sys
solo, lim, s0, s1 = (json.load(open(f)) for f in sys.argv[1:5])
t0, t1 = float(sys.argv[5]), float(sys.argv[6])
def rate(samples, a, b):
    inside = [(t, n) for t, n in samples if a <= t <= b]
    (ta, na), (tb, nb) = inside[0], inside[-1]
    return (nb - na) / (tb - ta)
s = solo["samples"]
solo_rate = rate(s, s[0][0] + 2, s[-1][0])
got = rate(lim["samples"], t0, t1) / solo_rate
ns = lambda doc: next(c["gpu_time_ns"] for c in doc["clients"] if c["name"] == "lim")
used = (ns(s1) - ns(s0)) / 1e9 / (t1 - t0)
print(json.dumps({"build": sys.argv[7], "limit": float(sys.argv[8]), "got": round(got, 4),
                  "used": round(used, 4), "solo_rate": round(solo_rate, 2),
                  "stretch_s": round(t1 - t0, 2)}))
EOF
done
python3 - "$out" <<'EOF'
import json, sys
print("| build | limit | got (rate / solo) | USED |")
print("| --- | --- | --- | --- |")
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    r = json.loads(line)
    print(f"| {r['build']} | {r['limit']} | {r['got']:.3f} | {r['used']:.3f} |")
EOF
