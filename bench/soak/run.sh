#!/bin/bash
# A randomized lab soak: does every client get the share it is due, across mixes of workloads?
#   bench/soak/run.sh OUTPUT_DIR SEED [SEED...]      (run as root)
# For each SEED, scenario.py draws a scenario from random.Random(SEED) and prints it: 2-8 clients
# of random requests (summing to at most 1), limits and classes (a few `interactive = true` of
# small request), bound to Unix users gsbench1-8, each with 1-2 processes of the workload library
# (soak_job.py: matmul kernels of 20 us-50 ms synchronizing after each, every 4 or never; CUDA
# graphs; training loops bound by their host; a launch-bound MLP; bursty jobs; inference every
# 5 ms), some starting later or ending earlier, and one or two share changes at random times.
# Running `bench/soak/run.sh DIR 17` again replays seed 17 exactly (with the same SOAK_SECONDS).
# A SEED may also name a hand-written mix, cells/NAME.json (scenario.py says how one is written).
# Per seed, in OUTPUT_DIR/seed-SEED:
#   solo       each workload of the seed not yet in OUTPUT_DIR/solo.jsonl alone on the GPU, for
#              SOAK_SOLO_SECONDS: its solo rate (units/s) and busy fraction (the share of the
#              GPU it keeps busy alone), and the matmul shape of each kernel time
#   gpushare   the scenario for SOAK_SECONDS under a fresh gpushared (lib.sh's: no NVML, compute
#              mode untouched, no MPS), every process under the hook as its client; the daemon's
#              status (`gpushare --json status`) every second into status.jsonl; each share
#              change by rewriting the config file and SIGHUP (with --bus none the daemon has no
#              D-Bus for `gpushare set`), recorded in changes.jsonl with its time
#   timeslice  the same processes without the hook for SOAK_TIMESLICE_SECONDS, their start and
#              end times scaled to it: the driver's time-slicing, for the throughput comparison
# Every process writes its progress as JSON lines (PHASE/PROC.jsonl). Then analyze.py writes per
# seed windows.jsonl (demand, got and the daemon's USED per client and 5 s window), verdicts.jsonl
# (where target/release/gpushare-referee exists) and summary.json, and OUTPUT_DIR/summary.md and
# got_vs_due.png for all seeds in OUTPUT_DIR.
# Environment (defaults in brackets):
#   SOAK_SECONDS [180] the run under gpushare; SOAK_TIMESLICE_SECONDS [40] the time-sliced run (0
#   leaves it out); SOAK_SOLO_SECONDS [2] each solo measurement; SOAK_LEAD [10] seconds a process
#   is started before its work begins (import, CUDA context, warm-up); SOAK_WINDOW [5];
#   SOAK_DAEMON lines for the daemon's [daemon] table (e.g. 'queue_ahead = "1ms"');
#   SOAK_HOOK_ENV more environment of the processes under gpushare (e.g. GPUSHARE_BUSY=gpu);
#   SOAK_BUDGET [none] seconds for the whole call: a phase that would end past it is skipped;
#   SOAK_AS_SELF=1 runs every process as the calling user (every client allows that user), as
#   happens anyway where the users cannot be created;
#   SOAK_DRY=1 only draws, prints and writes the scenarios and the daemon's configs (no GPU).
# About 4.5 minutes per seed with the defaults: `SOAK_BUDGET=580 bench/soak/run.sh DIR 1 2` fits
# a ten-minute call. Needs python3 with torch; gpushared, gpushare and libgpushare.so prebuilt in
# $TARGET (default target/release). The GPU's settings are untouched; every process stops by
# itself and allocates under 2 GiB of device memory, none of it managed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
outdir=${1:?usage: bench/soak/run.sh OUTPUT_DIR SEED [SEED...]}
shift
(($#)) || { echo "usage: bench/soak/run.sh OUTPUT_DIR SEED [SEED...]" >&2; exit 2; }
seeds=("$@")
# shellcheck source=../lib.sh
. "$here/../lib.sh"
# shellcheck source=../users.sh
. "$here/../users.sh"
export PYTHONUNBUFFERED=1
seconds=${SOAK_SECONDS:-180}
ts_seconds=${SOAK_TIMESLICE_SECONDS:-40}
solo_seconds=${SOAK_SOLO_SECONDS:-2}
lead=${SOAK_LEAD:-10}
window=${SOAK_WINDOW:-5}
budget=${SOAK_BUDGET:-0}
dry=${SOAK_DRY:-}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
self=$(id -un)
as_self=${SOAK_AS_SELF:-} # set: every process runs as $self (also where the users cannot be had)

log() { echo "$*" >&2; }
add() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a + b }'; }
now() { python3 -c 'import time; print(round(time.time(), 4))'; }
sleep_until() { python3 -c 'import sys, time; time.sleep(max(0, float(sys.argv[1]) - time.time()))' "$1"; }
# fits SECONDS WHAT: whether WHAT, about SECONDS long, ends within SOAK_BUDGET; else an error line
fits() {
  ((budget == 0 || SECONDS + $1 <= budget)) && return 0
  json_line error="skipped $2: ${SECONDS}s gone, about $1 s more would pass SOAK_BUDGET=$budget" >>"$dir/errors.jsonl"
  log "   skipped $2 (budget)"
  return 1
}
# config [K]: the daemon's config, the clients after the Kth share change (none: the first)
config() {
  local clients=$dir/clients.toml
  [[ -n ${1:-} ]] && clients=$dir/clients.change$1.toml
  [[ -n ${SOAK_DAEMON:-} ]] && printf '[daemon]\n%s\n' "$SOAK_DAEMON"
  gpu_toml false
  echo
  if [[ -n $as_self ]]; then
    sed -E "s/^users = .*/users = [\"$self\"]/" "$clients"
  else
    cat "$clients"
  fi
}
# the plan of the seed (scenario.py's plan.tsv) into arrays: procs (one line each) and changes
read_plan() {
  procs=() changes=()
  local kind rest
  while IFS=$'\t' read -r kind rest; do
    case $kind in
      proc) procs+=("$rest") ;;
      change) changes+=("$rest") ;;
    esac
  done <"$dir/plan.tsv"
}

# launch_proc MODE T0 NAME CLIENT USER SPEC START END SEED: the process in the background, started
# SOAK_LEAD seconds before its work begins at T0 + START; its pid in `pids`
launch_proc() {
  local mode=$1 t0=$2 name=$3 client=$4 u=$5 spec=$6 start until e=""
  start=$(add "$t0" "$7") until=$(add "$t0" "$8")
  [[ -n $as_self ]] && u=$self
  [[ $mode == gpushare ]] && e="$uhook GPUSHARE_CLIENT=$client GPUSHARE_STATS=1 ${SOAK_HOOK_ENV:-}"
  (
    sleep_until "$(add "$start" "-$lead")"
    # shellcheck disable=SC2086
    as_user "$u" timeout "$((lead + ${8%.*} - ${7%.*} + 30))" env $e OMP_NUM_THREADS=1 "$py" \
      "$jobdir/soak_job.py" run "$spec" --name "$name" --client "$client" --mode "$mode" --seed "$9" \
      --calib "$jobdir/solo.jsonl" --start "$start" --until "$until"
  ) >"$dir/$mode/$name.jsonl" 2>"$dir/$mode/$name.err" &
  pids+=($!)
}

# change_at K T CLIENT REQUEST: at the absolute time T, the config of the Kth share change in place
# of the daemon's, and SIGHUP; a line in changes.jsonl with the time and whether the daemon took it
change_at() {
  local t
  sleep_until "$2"
  config "$1" >"$work/gpushare.toml.new" && mv -f "$work/gpushare.toml.new" "$work/gpushare.toml"
  t=$(now)
  kill -HUP "$daemon"
  sleep 0.5
  "$target/gpushare" --bus none --socket "$work/run/gpushare.sock" --json status 2>/dev/null | python3 -c '
import json, sys
k, client, request, t = sys.argv[1:]
try:
    doc = json.load(sys.stdin)
except ValueError:
    doc = {"config_error": "no status from the daemon"}
seen = [c["request"] for c in doc.get("clients", []) if c["name"] == client]
print(json.dumps({"change": int(k), "client": client, "request": float(request), "t": float(t),
                  "applied": bool(seen) and abs(seen[0] - float(request)) < 1e-6,
                  "seen_request": seen[0] if seen else None, "config_error": doc.get("config_error", "")}))
' "$1" "$3" "$4" "$t" >>"$dir/changes.jsonl"
}

solo_phase() {
  local specs
  specs=$(for p in "${procs[@]}"; do cut -f4 <<<"$p"; done | awk '!seen[$0]++' | tr '\n' ' ')
  log "== seed $seed: solo ($specs)"
  fits $((10 + 5 * $(wc -w <<<"$specs"))) "seed $seed solo" || return
  cp "$outdir/solo.jsonl" "$jobdir/solo.jsonl" 2>/dev/null || : >"$jobdir/solo.jsonl"
  chmod 644 "$jobdir/solo.jsonl"
  local u=gsbench1
  [[ -n $as_self ]] && u=$self
  # shellcheck disable=SC2086
  as_user "$u" timeout 300 env OMP_NUM_THREADS=1 "$py" "$jobdir/soak_job.py" solo $specs \
    --seconds "$solo_seconds" --calib "$jobdir/solo.jsonl" >"$work/solo.out" 2>"$dir/solo.err"
  grep -h '^{' "$work/solo.out" >>"$outdir/solo.jsonl"
  cp "$outdir/solo.jsonl" "$jobdir/solo.jsonl"
  # shellcheck disable=SC2086
  python3 - "$outdir/solo.jsonl" $specs <<'PY' >&2
import json, sys
solo = {r["spec"]: r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "solo"}
for s in sys.argv[2:]:
    r = solo.get(s)
    print("   %-18s %s" % (s, "no solo measurement (see solo.err)" if not r else
                          "%.1f units/s, busy %.2f%s" % (r["rate"], r["busy"],
                          ", p99 %.2f ms" % r["p99_ms"] if "p99_ms" in r else "")))
PY
}

# mode_phase gpushare|timeslice: every process of the plan, at its times in that run
mode_phase() {
  local mode=$1 span=$seconds t0 p name client u spec start end ts_start ts_end pseed pids=() k t c r
  [[ $mode == timeslice ]] && span=$ts_seconds
  log "== seed $seed: $mode (${span} s)"
  fits $((lead + ${span%.*} + 8)) "seed $seed $mode" || return 1
  mkdir -p "$dir/$mode"
  if [[ $mode == gpushare ]]; then
    config >"$work/gpushare.toml"
    cp "$work/gpushare.toml" "$dir/gpushare.toml"
    gpushared_start "$work/gpushare.toml" "$dir/gpushared.log" || {
      json_line error="gpushared did not start: $(tail -2 "$dir/gpushared.log" | tr '\n' ' ')" >>"$dir/errors.jsonl"
      gpushared_stop
      return 1
    }
    chmod 755 "$work/run"
  fi
  t0=$(at "$lead")
  json_line mode="$mode" t0="$t0" seconds="$span" lead="$lead" >>"$dir/runs.jsonl"
  for p in "${procs[@]}"; do
    IFS=$'\t' read -r name client u spec start end ts_start ts_end pseed <<<"$p"
    [[ $mode == timeslice ]] && start=$ts_start end=$ts_end
    launch_proc "$mode" "$t0" "$name" "$client" "$u" "$spec" "$start" "$end" "$pseed"
  done
  if [[ $mode == gpushare ]]; then
    python3 "$here/status_sampler.py" --cli "$target/gpushare" --socket "$work/run/gpushare.sock" \
      --until "$(add "$t0" "$((${span%.*} + 2))")" >"$dir/status.jsonl" 2>"$dir/status.err" &
    pids+=($!)
    for c in "${changes[@]}"; do
      IFS=$'\t' read -r k t client r <<<"$c"
      change_at "$k" "$(add "$t0" "$t")" "$client" "$r" &
      pids+=($!)
    done
  fi
  wait "${pids[@]}"
  gpushared_stop
  for p in "$dir/$mode"/*.err; do
    grep -h '^gpushare: stats' "$p" | sed "s|^|$(basename "$p" .err): |" >>"$dir/$mode.stats.txt"
    grep -q '"kind": "end"' "${p%.err}.jsonl" ||
      json_line mode="$mode" proc="$(basename "$p" .err)" error="no end line: $(grep -v '^gpushare' "$p" | tail -2 | tr '\n' ' ')" >>"$dir/errors.jsonl"
  done
}

run_seed() {
  dir=$outdir/seed-$seed
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "== seed $seed"
  python3 "$here/scenario.py" "$seed" --seconds "$seconds" --timeslice-seconds "$ts_seconds" --dir "$dir" ||
    { log "scenario.py failed for seed $seed"; return; }
  read_plan
  if [[ -n $dry ]]; then
    config >"$dir/gpushare.toml"
    for k in $(seq ${#changes[@]}); do config "$k" >"$dir/gpushare.change$k.toml"; done
    echo "-- the daemon's config ($dir/gpushare.toml) and the processes as run.sh would start them:"
    sed 's/^/   /' "$dir/gpushare.toml"
    for p in "${procs[@]}"; do
      IFS=$'\t' read -r name client u spec start end ts_start ts_end pseed <<<"$p"
      printf '   +%6.1f s  as %-9s GPUSHARE_CLIENT=%-3s soak_job.py run %s --name %s --seed %s (until +%g s; time-sliced +%g-%g s)\n' \
        "$start" "$u" "$client" "$spec" "$name" "$pseed" "$end" "$ts_start" "$ts_end"
    done
    return
  fi
  solo_phase
  mode_phase gpushare || return
  ((${ts_seconds%.*} > 0)) && mode_phase timeslice
  python3 "$here/analyze.py" "$outdir" --window "$window" >/dev/null || log "analyze.py failed"
}

if [[ -z $dry ]]; then
  header "soak seeds=${seeds[*]} seconds=$seconds timeslice=$ts_seconds solo=$solo_seconds lead=$lead" >>"$outdir/soak.log"
  bench_copy "$here/soak_job.py"
  if [[ -z $as_self ]] && ! bench_users gsbench1 gsbench2 gsbench3 gsbench4 gsbench5 gsbench6 gsbench7 gsbench8 >>"$outdir/soak.log"; then
    as_self=1
    log "users gsbench1-8 unavailable: every process runs as $self, every client allows $self"
    json_line note="users gsbench1-8 unavailable: every process runs as $self" >>"$outdir/soak.log"
  fi
fi
for seed in "${seeds[@]}"; do
  [[ $seed =~ ^[0-9]+$ || -f $here/cells/$seed.json ]] || { log "not a seed, nor a cell of $here/cells: $seed"; continue; }
  run_seed
done
if [[ -z $dry ]]; then
  log "== summary (${SECONDS}s)"
  python3 "$here/analyze.py" "$outdir" --window "$window"
fi
