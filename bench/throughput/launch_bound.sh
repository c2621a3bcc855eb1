#!/bin/bash
# Launch-bound jobs under a token scheduler in its default mode: 8 MNIST-sized MLP training jobs
# (mnist_job.py: 784-512-256-10, batch 64, SGD, 1000 steps, synthetic data on the GPU) started
# together, each printing the wall time of its steps, in these modes (MODES, in this order in odd
# rounds and reversed in even ones, ROUNDS rounds):
#   timeslice       no gpushare: the driver's time-slicing
#   timeslice_users the same, each job run by its own Unix user (gsbench1-8, created when
#                   missing)
#   hook_only       the hook loaded but no daemon (GPUSHARE_NO_DAEMON=passthrough): what
#                   intercepting the driver alone costs
#   gpushare        a fresh gpushared with the default configuration (only the [gpu] table
#                   every benchmark daemon has: no MPS, so one lease at a time unless the GPU
#                   has room); every job attaches without naming a client, as the calling
#                   user's default client
#   gpushare_users  the same, each job run by its own Unix user (gsbench1-8, created when
#                   missing), so each is its own user's default client
#   MODE_alt        (hook_only, gpushare, gpushare_users) the same with the libgpushare.so of
#                   $ALT_TARGET: two builds of the hook side by side
# For the gpushare modes, each job's hook counters (GPUSHARE_STATS=1) go to PHASE.stats.txt and
# the daemon's status (`gpushare status --json`) 1 s and 3 s into the
# steps goes to PHASE.status1.json and PHASE.status3.json: the grants and waits between them.
#   bench/throughput/launch_bound.sh [OUTPUT_DIR]      (run as root)
# Aggregate throughput = the jobs' steps over the time from the first job's first step to the
# last job's last; the summary gives it per mode and round, the jobs' mean wall and CPU time
# (all threads) over their steps, and the ratio of each mode to time-slicing per round (and over
# all rounds).
# Environment: JOBS [8], STEPS [1000], ITEM_EVERY [10] (loss.item() every that many steps),
# ROUNDS [2], MODES [timeslice gpushare gpushare_users], STARTUP [15] seconds for the jobs to
# start before their steps begin together, BUDGET [450] seconds after which runs not yet started
# are skipped. About 3-4 minutes on an H100.
# Needs python3 with torch; gpushared and libgpushare.so prebuilt in $TARGET (default
# target/release). The GPU's settings are untouched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
# shellcheck source=../users.sh
. "$here/../users.sh"
export PYTHONUNBUFFERED=1
outdir=${1:-${OUT:-$here}}
out=$outdir/launch_bound.jsonl
njobs=${JOBS:-8}
steps=${STEPS:-1000}
item_every=${ITEM_EVERY:-10}
rounds=${ROUNDS:-2}
modes=${MODES:-timeslice gpushare gpushare_users}
startup=${STARTUP:-15}
budget=${BUDGET:-450}
mkdir -p "$outdir"
: >"$out"
log() { echo "$*" >&2; }

# sleep_until T S: until S seconds after the time.time() T
sleep_until() { python3 -c "import time; time.sleep(max(0, $1 + $2 - time.time()))"; }

# run MODE ROUND: the jobs at once, phase MODE.rROUND
run() {
  local mode=$1 r=$2 phase=$1.r$2 i u e pids=() files=() start f base=${1%_alt} lib=$work/lib/libgpushare.so
  [[ $mode == *_alt ]] && lib=$work/lib/alt/libgpushare.so
  log "== round $r: $mode"
  if ((SECONDS + startup + 60 > budget)); then
    json_line phase="$phase" mode="$mode" round="$r" error="skipped: ${SECONDS}s gone, BUDGET=$budget" >>"$out"
    return
  fi
  if [[ $base != timeslice* && ! -f $lib ]]; then
    json_line phase="$phase" mode="$mode" round="$r" error="no hook library for $mode" >>"$out"
    return
  fi
  if [[ $base == gpushare* ]]; then
    gpu_toml false >"$work/gpushare.toml"
    gpushared_start "$work/gpushare.toml" "$outdir/launch_bound.gpushared.log" || {
      json_line phase="$phase" mode="$mode" round="$r" error="gpushared did not start" >>"$out"
      gpushared_stop
      return
    }
    chmod 755 "$work/run"
  fi
  start=$(at "$startup")
  for i in $(seq "$njobs"); do
    u="" e=""
    [[ $base == gpushare* ]] && e="LD_PRELOAD=$lib GPUSHARE_SOCKET=$work/run/gpushare.sock GPUSHARE_NO_DAEMON=refuse GPUSHARE_STATS=1"
    [[ $base == hook_only ]] && e="LD_PRELOAD=$lib GPUSHARE_SOCKET=$work/no-daemon.sock GPUSHARE_NO_DAEMON=passthrough"
    [[ $base == *_users ]] && u=gsbench$i
    f=$work/$phase.$i
    files+=("$f")
    # shellcheck disable=SC2086
    as_user "$u" timeout $((startup + 240)) env $e "$py" "$jobdir/mnist_job.py" "job$i" --phase "$phase" \
      --mode "$mode" --round "$r" --steps "$steps" --item-every "$item_every" --start "$start" >"$f" 2>"$f.err" &
    pids+=($!)
  done
  if [[ $base == gpushare* ]]; then
    # the daemon's view of the clients 1 s and 3 s into the steps: grants and waits between them
    for f in 1 3; do
      sleep_until "$start" "$f"
      "$target/gpushare" status --bus none --socket "$work/run/gpushare.sock" --json \
        >"$outdir/$phase.status$f.json" 2>/dev/null
    done
  fi
  wait "${pids[@]}"
  gpushared_stop
  for f in "${files[@]}"; do
    [[ $base == gpushare* ]] &&
      grep -h '^gpushare: stats' "$f.err" | sed "s|^|$(basename "$f"): |" >>"$outdir/$phase.stats.txt"
    grep -h '^{' "$f" >>"$out" 2>/dev/null ||
      json_line phase="$phase" mode="$mode" round="$r" job="$(basename "$f")" \
        error="no result: $(grep -v '^gpushare' "$f.err" | tail -3 | tr '\n' ' ')" >>"$out"
  done
  python3 - "$phase" "${files[@]}" <<'PY' >&2
import json, sys
rows = [json.loads(l) for f in sys.argv[2:] for l in open(f) if l.startswith("{")]
if rows:
    span = max(r["t_end"] for r in rows) - min(r["t_start"] for r in rows)
    print("   %d jobs done, %.0f steps/s together, job wall times %s s, latest start %.2f s late"
          % (len(rows), sum(r["steps"] for r in rows) / span, " ".join("%.2f" % r["wall_s"] for r in rows),
             max(r["late_s"] for r in rows)))
else:
    print("   no job finished")
PY
}

header "jobs=$njobs steps=$steps item_every=$item_every rounds=$rounds startup=$startup" >>"$out"
bench_copy "$here/mnist_job.py"
if [[ " $modes " == *"_users "* || " $modes " == *"_users_alt "* ]]; then
  users=()
  for i in $(seq "$njobs"); do users+=("gsbench$i"); done
  if ! bench_users "${users[@]}" >>"$out"; then
    log "users gsbench1-$njobs unavailable: no *_users modes"
    json_line note="users gsbench1-$njobs unavailable: modes *_users left out" >>"$out"
    modes=$(echo " $modes " | sed -E 's/ [a-z_]*_users(_alt)? / /g')
  fi
fi
read -ra order <<<"$modes"
for r in $(seq "$rounds"); do
  if ((r % 2 == 1)); then
    for m in "${order[@]}"; do run "$m" "$r"; done
  else
    for ((i = ${#order[@]} - 1; i >= 0; i--)); do run "${order[i]}" "$r"; done
  fi
done

log "== summary (${SECONDS}s)"
python3 - "$out" "$njobs" "$steps" <<'PY' | tee "$outdir/launch_bound_summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
njobs, steps = int(sys.argv[2]), int(sys.argv[3])
runs = {}
for r in rows:
    if "t_start" in r:
        runs.setdefault((r["mode"], r["round"]), []).append(r)
out = {"jobs": njobs, "steps": steps, "modes": {}, "errors": [r for r in rows if "error" in r],
       "notes": [r["note"] for r in rows if "note" in r]}
for (mode, rnd), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    span = max(r["t_end"] for r in rs) - min(r["t_start"] for r in rs)
    m = out["modes"].setdefault(mode, {"rounds": {}})
    m["rounds"][str(rnd)] = {
        "jobs_done": len(rs), "makespan_s": span, "aggregate_steps_per_s": sum(r["steps"] for r in rs) / span,
        "job_wall_s": [round(r["wall_s"], 3) for r in sorted(rs, key=lambda r: r["name"])],
        "mean_job_wall_s": sum(r["wall_s"] for r in rs) / len(rs),
        "mean_job_cpu_s": sum(r.get("cpu_s", 0) for r in rs) / len(rs),
        "max_late_s": max(r["late_s"] for r in rs)}
for mode, m in out["modes"].items():
    rr = m["rounds"].values()
    m["aggregate_steps_per_s"] = sum(x["aggregate_steps_per_s"] for x in rr) / len(rr)
    m["mean_job_wall_s"] = sum(x["mean_job_wall_s"] for x in rr) / len(rr)
    m["complete"] = all(x["jobs_done"] == njobs for x in rr)
ts = out["modes"].get("timeslice")
if ts:
    for mode, m in out["modes"].items():
        if mode == "timeslice":
            continue
        per = {k: x["aggregate_steps_per_s"] / ts["rounds"][k]["aggregate_steps_per_s"]
               for k, x in m["rounds"].items() if k in ts["rounds"]}
        m["vs_timeslice_per_round"] = per
        m["vs_timeslice"] = m["aggregate_steps_per_s"] / ts["aggregate_steps_per_s"]
        m["job_wall_vs_timeslice"] = m["mean_job_wall_s"] / ts["mean_job_wall_s"]
print(json.dumps(out, indent=1))
PY
