#!/bin/bash
# Share accuracy and work conservation on a real GPU, side by side in one run:
#   bench/share/run.sh [OUTPUT_DIR]
# Saturating bf16 matmul jobs (PyTorch, matmul_job.py) run alone without the hook (their solo
# rate); alone under the hook with request 0.2 beside an idle client (work conservation); 2, 3,
# 4 and 8 at once under gpushare with the requests below, each set with a fresh daemon; and 2
# and 4 at once without the hook (the driver's default time-slicing, which knows no requests).
# A job's share is its rate divided by the solo rate, per WINDOW-second window (default 10) of
# the time all ran at once.
# Needs python3 with torch; gpushared and libgpushare.so prebuilt in $TARGET (default
# target/release). The GPU's settings are untouched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
outdir=${1:-${OUT:-$here}}
out=$outdir/share.jsonl
quantum=${QUANTUM:-20ms}
span=${SPAN:-22}
window=${WINDOW:-10}
mkdir -p "$outdir"
: >"$out"
job() { python3 "$here/matmul_job.py" "$@"; }

# PHASE REQUEST...: client jN with the Nth request, and a job for each client whose request is
# not marked idle: (an idle client is configured but runs nothing); all to a common deadline.
shares() {
  local phase=$1 i=0 r pids=() u
  shift
  { echo "[daemon]"; echo "quantum = \"$quantum\""; gpu_toml false; } >"$work/gpushare.toml"
  for r in "$@"; do
    i=$((i + 1))
    printf '[clients.j%s]\nrequest = %s\nusers = ["*"]\n' "$i" "${r#idle:}" >>"$work/gpushare.toml"
  done
  gpushared_start "$work/gpushare.toml" "$outdir/share.gpushared.log" || return
  u=$(at $((span + 4 + $# / 2)))
  i=0
  for r in "$@"; do
    i=$((i + 1))
    [[ $r == idle:* ]] && continue
    env $hook GPUSHARE_CLIENT=j$i python3 "$here/matmul_job.py" "ref.j$i" --phase "$phase" \
      --request "$r" --until "$u" >"$work/$phase.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
  cat "$work/$phase".* >>"$out"
  gpushared_stop
}
# PHASE N: N jobs without the hook.
plain() {
  local phase=$1 i pids=() u
  u=$(at $((span + 4 + $2 / 2)))
  for i in $(seq "$2"); do
    job "ref.plain$i" --phase "$phase" --until "$u" >"$work/$phase.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
  cat "$work/$phase".* >>"$out"
}

header "quantum=$quantum" >>"$out"
job ref --phase solo --until "$(at 10)" >>"$out"
# alone under the hook with request 0.2, the other client (request 0.8) idle: work conservation
shares lone 0.2 idle:0.8
shares pair 0.7 0.3
shares triple 0.5 0.3 0.2
shares quad 0.4 0.3 0.2 0.1
shares octet 0.3 0.2 0.1 0.1 0.1 0.1 0.05 0.05
plain plain_pair 2
plain plain_quad 4
python3 "$here/analyze.py" --window "$window" "$out" | tee "$outdir/share_summary.json"
