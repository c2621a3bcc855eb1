#!/bin/bash
# A lab's mix in gpushare's default configuration: different users' jobs of every kind on one GPU
# at once, against the driver's time-slicing:
#   bench/mixed/run.sh [OUTPUT_DIR]      (run as root)
# The jobs (JOBS, NAME:KIND:USER, each its user's default client: no client is configured):
#   tf     transformer    an 8-layer transformer training loop (share/transformer_job.py)
#   cnn    cnn            a small CNN training loop, kernels of tens to hundreds of us
#   mlp    mlp            a launch-bound MNIST-sized MLP training loop
#   big    bigmm          16384^2 bf16 matmuls (about 13 ms each on an H100), never
#                         synchronizing but every ~1 s of queued work (share/kernel_job.py)
#   load   dataload       a training loop whose every step copies a host batch in and spends
#                         4 ms of CPU "loading" the next: the GPU idle part of each step
#   rl     tiny           tiny kernels and a synchronize every step
#   infer  infer          an inference client, batch class (latency/infer_job.py): p50/p99
# (lab_job.py holds the kinds cnn, mlp, dataload and tiny.) Phases:
#   NAME.solo       each job alone, without the hook (SOLO=0 leaves them out)
#   timeslice       all at once, without the hook: the driver's time-slicing
#   gpushare        all at once under a fresh gpushared in its default configuration (no MPS),
#                   each job its own user's default client
#   gpushare_twojobs the same, but the second job runs as the first job's user: that user's
#                   client has two processes, each weighing half of the others
#   MODE_alt        (gpushare, gpushare_twojobs) the same with the gpushared and libgpushare.so
#                   of $ALT_TARGET: two builds side by side
# A job's rate is its steps (kernels, requests) per second over the phase's span, from STARTUP
# seconds after the launch (the jobs' warm-up) to the deadline; its share is the rate over its
# solo rate. The summary (mixed_summary.json) gives per phase each job's rate, share, rate over
# its rate under time-slicing, the sum of shares, and the inference client's latency percentiles.
# Environment: JOBS [the seven above, users gsbench1-7], MODES [timeslice gpushare
# gpushare_twojobs], SPAN [20] measured seconds of a shared phase, SOLO_SPAN [6], STARTUP [15],
# ROUNDS [1] (modes reversed in even rounds), SOLO [1], BUDGET [540] seconds after which phases
# not yet started are skipped. About 4.5 minutes on an H100.
# Needs python3 with torch; gpushared and libgpushare.so prebuilt in $TARGET (default
# target/release). The GPU's settings are untouched; users are created when missing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
# shellcheck source=../users.sh
. "$here/../users.sh"
export PYTHONUNBUFFERED=1
outdir=${1:-${OUT:-$here}}
out=$outdir/mixed.jsonl
read -ra jobs <<<"${JOBS:-tf:transformer:gsbench1 cnn:cnn:gsbench2 mlp:mlp:gsbench3 big:bigmm:gsbench4 load:dataload:gsbench5 rl:tiny:gsbench6 infer:infer:gsbench7}"
modes=${MODES:-timeslice gpushare gpushare_twojobs}
span=${SPAN:-20}
solo_span=${SOLO_SPAN:-6}
startup=${STARTUP:-15}
rounds=${ROUNDS:-1}
budget=${BUDGET:-540}
mkdir -p "$outdir"
: >"$out"
log() { echo "$*" >&2; }

# launch_job FILE USER ENV PHASE MODE NAME KIND START UNTIL: one job in the background
launch_job() {
  local f=$1 u=$2 e=$3 phase=$4 mode=$5 n=$6 kind=$7 start=$8 until=$9 args
  case $kind in
    transformer) args=(transformer_job.py "$n" --cell mixed --user "$u") ;;
    bigmm) args=(kernel_job.py "$n" --cell mixed --user "$u" --shape 1,16384 --sync 0) ;;
    infer) args=(infer_job.py "$n" --start "$start") ;;
    *) args=(lab_job.py "$n" --kind "$kind" --user "$u") ;;
  esac
  [[ $kind == infer ]] || args+=(--mode "$mode")
  # shellcheck disable=SC2086
  as_user "$u" timeout $((startup + span + 90)) env $e "$py" "$jobdir/${args[0]}" "${args[@]:1}" \
    --phase "$phase" --until "$until" >"$f" 2>"$f.err" &
  pids+=($!)
}

# phase PHASE MODE [JOB]: the jobs (or JOB alone) at once
phase() {
  local phase=$1 mode=${2%_alt} only=${3:-} pids=() files=() j n k u e s start until first_user=""
  local hook=$uhook target=$target
  local secs=$span
  [[ -n $only ]] && secs=$solo_span
  log "== $phase"
  if ((SECONDS + startup + secs + 15 > budget)); then
    json_line phase="$phase" error="skipped: ${SECONDS}s gone, BUDGET=$budget" >>"$out"
    return
  fi
  if [[ $2 == *_alt ]]; then use_alt "$phase" || return; fi
  if [[ $mode == gpushare* ]]; then
    gpu_toml false >"$work/gpushare.toml"
    gpushared_start "$work/gpushare.toml" "$outdir/mixed.gpushared.log" ||
      { json_line phase="$phase" error="gpushared did not start" >>"$out"; gpushared_stop; return; }
    chmod 755 "$work/run"
  fi
  start=$(at "$startup")
  until=$(at $((startup + secs)))
  s=0
  for j in "${jobs[@]}"; do
    IFS=: read -r n k u <<<"$j"
    [[ -n $only && $n != "$only" ]] && continue
    s=$((s + 1))
    [[ -z $first_user ]] && first_user=$u
    [[ $mode == gpushare_twojobs && $s == 2 ]] && u=$first_user
    e=""
    [[ $mode == gpushare* ]] && e="$hook GPUSHARE_STATS=1"
    files+=("$work/$phase.$n")
    launch_job "${files[-1]}" "$u" "$e" "$phase" "$mode" "$n" "$k" "$start" "$until"
  done
  wait "${pids[@]}"
  gpushared_stop
  for f in "${files[@]}"; do
    grep -h '^gpushare: stats' "$f.err" 2>/dev/null | sed "s|^|$(basename "$f"): |" >>"$outdir/$phase.stats.txt"
    if grep -h '^{' "$f" >"$f.json" 2>/dev/null; then
      python3 -c 'import json, sys; r = json.loads(open(sys.argv[1]).readline()); r.update(phase=sys.argv[2], mode=sys.argv[3], start=float(sys.argv[4]), deadline=float(sys.argv[5])); print(json.dumps(r))' \
        "$f.json" "$phase" "$mode" "$start" "$until" >>"$out"
    else
      json_line phase="$phase" job="$(basename "$f")" error="no result: $(grep -v '^gpushare' "$f.err" | tail -3 | tr '\n' ' ')" >>"$out"
    fi
  done
}

header "span=$span solo_span=$solo_span startup=$startup jobs=${jobs[*]}" >>"$out"
bench_copy "$here/lab_job.py" "$here/../share/transformer_job.py" "$here/../share/kernel_job.py" \
  "$here/../latency/infer_job.py"
users=()
for j in "${jobs[@]}"; do IFS=: read -r _ _ u <<<"$j"; users+=("$u"); done
if ! bench_users $(printf '%s\n' "${users[@]}" | awk '!seen[$0]++') >>"$out"; then
  log "users unavailable: every job runs as $(id -un)"
  json_line note="users unavailable: every job runs as $(id -un)" >>"$out"
  jobs=("${jobs[@]/%:gsbench*/:}")
fi
if [[ ${SOLO:-1} == 1 ]]; then
  for j in "${jobs[@]}"; do phase "${j%%:*}.solo" solo "${j%%:*}"; done
fi
read -ra order <<<"$modes"
for r in $(seq "$rounds"); do
  seq_modes=("${order[@]}")
  ((r % 2 == 0)) && mapfile -t seq_modes < <(printf '%s\n' "${order[@]}" | tac)
  for m in "${seq_modes[@]}"; do
    p=$m
    ((rounds > 1)) && p=$m.r$r
    phase "$p" "$m"
  done
done

log "== summary (${SECONDS}s)"
python3 - "$out" "$here/../share" <<'PY' | tee "$outdir/mixed_summary.json"
import json, sys

sys.path.insert(0, sys.argv[2])
from analyze import done_at  # noqa: E402

rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
out = {"phases": {}, "errors": [r for r in rows if "error" in r], "notes": [r["note"] for r in rows if "note" in r]}
jobs = [r for r in rows if "start" in r]
for r in jobs:
    ph = out["phases"].setdefault(r["phase"], {"mode": r["mode"], "jobs": {}})
    if "samples" in r:
        s = r["samples"]
        t0 = max(r["start"], s[0][0])
        t1 = min(r["deadline"] - 0.2, s[-1][0])
        a, b = done_at(s, t0), done_at(s, t1)
        v = (b - a) / (t1 - t0) if a is not None and b is not None and t1 > t0 else None
        ph["jobs"][r["name"]] = {"rate": v, "unit": r.get("unit"), "uid": r.get("uid"),
                                 "late_s": round(max(0.0, s[0][0] - r["start"]), 2)}
    else:
        ph["jobs"][r["name"]] = {"rate": r["requests"] / max(1e-9, r["deadline"] - r["start"]), "unit": "requests",
                                 "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "uid": r.get("uid")}
solo = {n.rsplit(".solo", 1)[0]: p["jobs"].get(n.rsplit(".solo", 1)[0], {}).get("rate")
        for n, p in out["phases"].items() if n.endswith(".solo")}
out["solo"] = solo
ts = {}
for n, p in out["phases"].items():
    if p["mode"] == "timeslice":
        for j, v in p["jobs"].items():
            ts.setdefault(j, []).append(v["rate"])
for n, p in out["phases"].items():
    if n.endswith(".solo"):
        continue
    shares = []
    for j, v in p["jobs"].items():
        if v["rate"] is not None and solo.get(j):
            v["share"] = round(v["rate"] / solo[j], 3)
            shares.append(v["share"])
        t = [x for x in ts.get(j, []) if x]
        if v["rate"] is not None and t and p["mode"] != "timeslice":
            v["vs_timeslice"] = round(v["rate"] / (sum(t) / len(t)), 3)
    if shares:
        p["sum_of_shares"] = round(sum(shares), 3)
    vs = [v["vs_timeslice"] for v in p["jobs"].values() if "vs_timeslice" in v]
    if vs:
        p["worst_vs_timeslice"] = min(vs)
print(json.dumps(out, indent=1))
PY
