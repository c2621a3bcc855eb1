#!/bin/bash
# Decayed fair share on a real GPU (daemon.fairshare_half_life):
#   bench/fair_share/run.sh [OUTPUT_DIR]      (run as root)
# Two saturating bf16 matmul jobs (bench/share/matmul_job.py) of two Unix users (gsbench1,
# gsbench2), each its user's default client with the default request, run together twice:
#   fair_off  fair share off: equal weights, so each is due half of the GPU;
#   fair_on   fairshare_half_life = "7d", with the usage database holding an hour of GPU time
#             of gsbench1 from an hour ago: gsbench1's factor is about 2^(-1/0.5) = 1/4 and
#             gsbench2's about 1, so they are due 1/5 and 4/5 while both run.
# Each job's --request records the share it is due; analyze.py then gives each job's share
# (its rate over its rate alone) and its largest distance from that share in WINDOW-second
# windows; notes (users made, the row added) go to fair_share.notes.jsonl. Needs python3 with
# torch; gpushared and libgpushare.so prebuilt in $TARGET (default target/release). The GPU's
# settings are untouched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
# shellcheck source=../users.sh
. "$here/../users.sh"
outdir=${1:-${OUT:-$here}}
out=$outdir/fair_share.jsonl
span=${SPAN:-22}
window=${WINDOW:-10}
mkdir -p "$outdir"
: >"$out"
bench_copy "$root/bench/share/matmul_job.py"
notes=$outdir/fair_share.notes.jsonl
bench_users gsbench1 gsbench2 >"$notes" || { echo "no benchmark users" >&2; exit 1; }

# config STATE_DIR [HALF_LIFE]
config() {
  { echo "[daemon]"; echo "state_dir = \"$1\""
    [[ -n ${2:-} ]] && echo "fairshare_half_life = \"$2\""
    gpu_toml false; } >"$work/gpushare.toml"
}
# pair PHASE DUE1 DUE2: both jobs at once, to a common deadline.
pair() {
  local phase=$1 u pids=()
  u=$(at $((span + 4)))
  as_user gsbench1 env $uhook "$py" "$jobdir/matmul_job.py" ref.gsbench1 --phase "$phase" \
    --request "$2" --until "$u" >"$work/$phase.1" &
  pids+=($!)
  as_user gsbench2 env $uhook "$py" "$jobdir/matmul_job.py" ref.gsbench2 --phase "$phase" \
    --request "$3" --until "$u" >"$work/$phase.2" &
  pids+=($!)
  wait "${pids[@]}"
  cat "$work/$phase".* >>"$out"
}

header "fair share" >>"$out"
python3 "$root/bench/share/matmul_job.py" ref --phase solo --until "$(at 10)" >>"$out"

config "$work/state_off"
gpushared_start "$work/gpushare.toml" "$outdir/fair_share.gpushared.log" || exit 1
pair fair_off 0.5 0.5
gpushared_stop

# A first start creates the usage database; an hour of gsbench1's GPU time is then added to it
# as accounting writes it (one row per hour, user and client).
config "$work/state" 7d
gpushared_start "$work/gpushare.toml" "$outdir/fair_share.gpushared.log" || exit 1
gpushared_stop
python3 - "$work/state/usage.db" <<'PY' >>"$notes"
import json, sqlite3, sys, time
hour = int(time.time()) // 3600 * 3600 - 3600
db = sqlite3.connect(sys.argv[1])
db.execute("INSERT INTO usage (hour, user, client, gpu_ns, leases) VALUES (?, ?, ?, ?, ?)",
           (hour, "gsbench1", "user.gsbench1", 3600 * 10**9, 1))
db.commit()
print(json.dumps({"note": "usage.db: an hour of GPU time of user.gsbench1", "hour": hour}))
PY
gpushared_start "$work/gpushare.toml" "$outdir/fair_share.gpushared.log" || exit 1
pair fair_on 0.2 0.8
gpushared_stop
python3 "$root/bench/share/analyze.py" --window "$window" "$out" | tee "$outdir/fair_share_summary.json"
