#!/bin/bash
# Latency isolation: a PyTorch inference client (batch 1-8, request 0.5) beside three saturating
# bf16 matmul trainers, under the driver's default time-slicing, plain MPS and gpushare, side by
# side in one run; p50/p99 request latency against the same client alone.
#   bench/latency/run.sh [OUTPUT_DIR]     (run as root)
# PHASES picks and orders the phases (default: all below; `solo` is the reference):
#   solo, gpushare_solo, mps_solo    the inference client alone: plain, under the hook, under MPS
#   timeslice, mps                   beside the trainers, without gpushare
#   mps_priority                     plain MPS, the trainers set to below-normal priority by hand
#   gpushare                         gpushare without MPS, one lease at a time
#   gpushare_interactive             the same, the inference client `interactive = true` (a
#                                    latency-class client: its work runs at once while batch
#                                    holders pause); the trainers plain batch clients
#   gpushare_interactive_q           the same, and `[daemon] queue_ahead = "1ms"` (the most work
#                                    a holder keeps queued on the GPU)
#   gpushare_default                 gpushare without MPS, concurrent_leases unset (the daemon's
#                                    default: leases overlap while the GPU has room)
#   gpushare_interactive_default     the same, the inference client `interactive = true`
#   gpushare_interactive_default_q   the same, and `[daemon] queue_ahead = QUEUE_AHEAD` (default
#                                    "1ms")
#   gpushare_own_default             gpushare_default, every process its own client of request
#                                    0.25 (as where each user has a client of the default
#                                    request): the inference client a batch client weighing as
#                                    much as each trainer
#   gpushare_mps                     gpushare under MPS, 4 concurrent leases
#   gpushare_mps_priority            the same, trainers' client `mps_priority = "below-normal"`
#   gpushare_mps_threadsNN           the same, and `mps_thread_percentage = NN` for the trainers
# TRAINER_SIZE (default 4096) and TRAINER_DTYPE (bfloat16; float32 runs without TF32, about ten
# times slower per flop) pick the trainers' matmul, so their kernels' length.
# QUANTUM (default 20ms) is the daemon's lease length. The default PHASES leave out the
# gpushare_interactive* and gpushare_default phases; bench/run.sh part 11 runs them beside solo,
# timeslice and gpushare.
# A phase that fails (a daemon that refuses its configuration, a client that dies) leaves an
# error line {"name": "error", "phase": ..., "error": ...} in latency.jsonl and the summary.
# Needs python3 with torch and the MPS binaries (MPS_BIN, default /usr/local/nvidia/bin);
# gpushared and libgpushare.so prebuilt in $TARGET (default target/release). Compute modes are
# not touched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
outdir=${1:-${OUT:-$here}}
out=$outdir/latency.jsonl
span=${SPAN:-15}
quantum=${QUANTUM:-20ms}
phases=${PHASES:-solo gpushare_solo mps_solo timeslice mps mps_priority gpushare gpushare_mps gpushare_mps_priority gpushare_mps_threads50 gpushare_mps_threads30}
trainer=$root/bench/share/matmul_job.py
infer=$here/infer_job.py
mkdir -p "$outdir"; : >"$out"

# PHASE TRAINER_ENV INFER_ENV: three trainers, and the inference client measuring from 4 s on
# (%i in TRAINER_ENV: the trainer's number).
beside_trainers() {
  local phase=$1 tenv=$2 ienv=$3 pids=() i start until
  start=$(at 4); until=$(at $((span + 4)))
  for i in 1 2 3; do
    env ${tenv//%i/$i} python3 "$trainer" "train.$i" --phase "$phase" --until "$until" --every 8 \
      --size "${TRAINER_SIZE:-4096}" --dtype "${TRAINER_DTYPE:-bfloat16}" >"$work/$phase.train.$i" &
    pids+=($!)
  done
  env $ienv python3 "$infer" infer --phase "$phase" --start "$start" --until "$until" >"$work/$phase.infer" 2>"$work/err.$phase"
  wait "${pids[@]}"
  cat "$work/$phase".* >>"$out"
  cat "$work/err.$phase" >&2
  grep -q '^{' "$work/$phase.infer" || error_line "$phase" "no inference result: $(grep -v '^gpushare' "$work/err.$phase" | tail -2 | tr '\n' ' ')"
}
# PHASE MESSAGE: an error line for a phase that failed.
error_line() {
  python3 -c 'import json, sys; print(json.dumps({"name": "error", "phase": sys.argv[1], "error": sys.argv[2]}))' "$1" "$2" >>"$out"
}
alone() { # PHASE INFER_ENV
  env $2 python3 "$infer" infer --phase "$1" --start "$(at 2)" --until "$(at $((span + 2)))" >>"$out"
}

# MPS(true|false) CONCURRENT_LEASES TRAINER_EXTRA_TOML [INFER_EXTRA_TOML [DAEMON_EXTRA_TOML]]
# (CONCURRENT_LEASES `default`: left unset; more keys of the trainers' client, of the inference
# client, of [daemon]). With OWN=1, clients infer, train1, train2 and train3 of request 0.25.
gpushare_with() {
  local i
  {
    printf '[daemon]\nquantum = "%s"\n%s\n' "$quantum" "${5:-}"
    [[ $2 == default ]] || printf 'concurrent_leases = %s\n' "$2"
    gpu_toml "$1"
    if [[ ${OWN:-} == 1 ]]; then
      printf '[clients.infer]\nrequest = 0.25\nusers = ["%s"]\n%s\n' "$(id -un)" "${4:-}"
      for i in 1 2 3; do
        printf '[clients.train%s]\nrequest = 0.25\nusers = ["%s"]\n%s\n' "$i" "$(id -un)" "$3"
      done
    else
      printf '[clients.infer]\nrequest = 0.5\nusers = ["%s"]\n%s\n' "$(id -un)" "${4:-}"
      printf '[clients.train]\nrequest = 0.5\nusers = ["%s"]\n%s\n' "$(id -un)" "$3"
    fi
  } >"$work/gpushare.toml"
  gpushared_start "$work/gpushare.toml" "$outdir/latency.gpushared.log" || {
    error_line "$phase" "gpushared did not start: $(tail -2 "$outdir/latency.gpushared.log" | tr '\n' ' ')"
    return 1
  }
}

header >>"$out"
for phase in $phases; do
  echo "== $phase" >&2
  iextra="" dextra=""
  case $phase in
    solo) alone solo "" ;;
    mps_solo) mps_start; alone mps_solo ""; mps_stop ;;
    gpushare_solo) gpushare_with false 1 "" && alone gpushare_solo "$hook GPUSHARE_CLIENT=infer"; gpushared_stop ;;
    timeslice) beside_trainers timeslice "" "" ;;
    mps) mps_start; beside_trainers mps "" ""; mps_stop ;;
    mps_priority) mps_start; beside_trainers mps_priority "CUDA_MPS_CLIENT_PRIORITY=1" ""; mps_stop ;;
    gpushare) extra="" mps=false leases=1 ;;&
    gpushare_interactive) extra="" mps=false leases=1 iextra="interactive = true" ;;&
    gpushare_interactive_q) extra="" mps=false leases=1 iextra="interactive = true" dextra='queue_ahead = "1ms"' ;;&
    gpushare_default) extra="" mps=false leases=default ;;&
    gpushare_interactive_default) extra="" mps=false leases=default iextra="interactive = true" ;;&
    gpushare_interactive_default_q) extra="" mps=false leases=default iextra="interactive = true" dextra="queue_ahead = \"${QUEUE_AHEAD:-1ms}\"" ;;&
    gpushare_own_default) extra="" mps=false leases=default ;;&
    gpushare_mps) extra="" mps=true leases=4 ;;&
    gpushare_mps_priority) extra='mps_priority = "below-normal"' mps=true leases=4 ;;&
    gpushare_mps_threads*)
      extra="mps_priority = \"below-normal\"
mps_thread_percentage = ${phase#gpushare_mps_threads}" mps=true leases=4 ;;&
    gpushare*)
      own="" tclient=train
      [[ $phase == gpushare_own* ]] && own=1 tclient=train%i
      OWN=$own gpushare_with "$mps" "$leases" "$extra" "$iextra" "$dextra" &&
        beside_trainers "$phase" "$hook GPUSHARE_CLIENT=$tclient" "$hook GPUSHARE_CLIENT=infer"
      gpushared_stop ;;
    *) echo "no phase $phase" >&2 ;;
  esac
done

python3 - "$out" <<'PY' | tee "$outdir/latency_summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
inf = {r["phase"]: r for r in rows if r.get("name") == "infer"}
solo = inf.get("solo")
out = {}
for x in rows:  # the phases in the order they ran; a failed one as its error
    p = x.get("phase")
    if x.get("name") == "error" and p not in inf:
        out[p] = {"error": x["error"]}
    elif p in inf and p not in out:
        out[p] = None
for phase, r in inf.items():
    t = [x for x in rows if x.get("phase") == phase and x.get("name", "").startswith("train.")]
    rate = 0.0
    for x in t:
        s = x["samples"]
        rate += (s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0])
    out[phase] = {"requests": r["requests"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
                  "trainer_iters_per_s": round(rate, 1)}
    if solo:
        out[phase]["p50_vs_solo"] = r["p50_ms"] / solo["p50_ms"]
        out[phase]["p99_vs_solo"] = r["p99_ms"] / solo["p99_ms"]
print(json.dumps(out, indent=1))
PY
