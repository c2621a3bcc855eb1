#!/bin/bash
# Latency isolation: a PyTorch inference client (batch 1-8, request 0.5) beside three saturating
# bf16 matmul trainers, under the driver's default time-slicing, plain MPS and gpushare, side by
# side in one run; p50/p99 request latency against the same client alone.
#   bench/latency/run.sh [OUTPUT_DIR]     (run as root)
# Needs python3 with torch and the MPS binaries (MPS_BIN, default /usr/local/nvidia/bin);
# gpushared and libgpushare.so prebuilt in $TARGET (default target/release). Compute modes are
# not touched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${TARGET:-$root/target/release}
outdir=${1:-${OUT:-$here}}
out=$outdir/latency.jsonl
span=${SPAN:-10}
phases=${PHASES:-solo gpushare_solo timeslice mps mps_priority gpushare gpushare_mps gpushare_mps_priority gpushare_mps_isolated}
mps_bin=${MPS_BIN:-/usr/local/nvidia/bin}
trainer=$root/bench/share/matmul_job.py
infer=$here/infer_job.py
mkdir -p "$outdir"; : >"$out"
work=$(mktemp -d); chmod 755 "$work"
daemon=""
mps_up=""
cleanup() {
  [[ -n $daemon ]] && kill "$daemon" 2>/dev/null
  [[ -n $mps_up ]] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe "$mps_bin/nvidia-cuda-mps-control"
  sleep 1; rm -rf "$work"
}
trap cleanup EXIT
at() { python3 -c "import time; print(time.time() + $1)"; }

# PHASE TRAINER_ENV INFER_ENV: three trainers, and the inference client measuring from 4 s on.
run_phase() {
  local phase=$1 tenv=$2 ienv=$3 pids=() i
  local start until
  start=$(at 4); until=$(at $((span + 4)))
  for i in 1 2 3; do
    env $tenv python3 "$trainer" "train.$i" --phase "$phase" --until "$until" --every 8 >"$work/$phase.train.$i" &
    pids+=($!)
  done
  env $ienv python3 "$infer" infer --phase "$phase" --start "$start" --until "$until" >"$work/$phase.infer"
  wait "${pids[@]}"
  cat "$work/$phase".* >>"$out"
}

start_mps() {
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  "$mps_bin/nvidia-cuda-mps-control" -d; mps_up=1; sleep 1
}
stop_mps() {
  echo quit | "$mps_bin/nvidia-cuda-mps-control"; mps_up=""; sleep 2
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

# MPS(true|false) CONCURRENT_LEASES TRAINER_EXTRA_TOML (more keys of the trainers' client)
start_gpushared() {
  cat >"$work/gpushare.toml" <<TOML
[daemon]
concurrent_leases = $2
[gpu]
nvml = false
set_compute_mode = false
mps = $1
mps_control = "$mps_bin/nvidia-cuda-mps-control"
mps_pipe_dir = "$work/gs-pipe"
mps_log_dir = "$work/gs-log"
[clients.infer]
request = 0.5
users = ["$(id -un)"]
[clients.train]
request = 0.5
users = ["$(id -un)"]
$3
TOML
  "$target/gpushared" --config "$work/gpushare.toml" --socket-dir "$work/run" --bus none --log warn 2>>"$outdir/latency.gpushared.log" &
  daemon=$!
  for _ in $(seq 100); do [[ -S $work/run/gpushare.sock ]] && break; sleep 0.1; done
  sleep 1
}
stop_gpushared() { kill "$daemon"; wait "$daemon" 2>/dev/null; daemon=""; sleep 2; }
hook="LD_PRELOAD=$target/libgpushare.so GPUSHARE_SOCKET=$work/run/gpushare.sock"

echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader)" >>"$out"
for phase in $phases; do
  echo "== $phase" >&2
  case $phase in
    solo)
      python3 "$infer" infer --phase solo --start "$(at 2)" --until "$(at $((span + 2)))" >>"$out" ;;
    timeslice) run_phase timeslice "" "" ;;
    mps) start_mps; run_phase mps "" ""; stop_mps ;;
    mps_priority)  # the trainers as MPS clients of below-normal priority, set by hand
      start_mps; run_phase mps_priority "CUDA_MPS_CLIENT_PRIORITY=1" ""; stop_mps ;;
    gpushare_solo)
      start_gpushared false 1 ""
      env $hook GPUSHARE_CLIENT=infer python3 "$infer" infer --phase gpushare_solo --start "$(at 2)" --until "$(at $((span + 2)))" >>"$out"
      stop_gpushared ;;
    gpushare)
      start_gpushared false 1 ""
      run_phase gpushare "$hook GPUSHARE_CLIENT=train" "$hook GPUSHARE_CLIENT=infer"; stop_gpushared ;;
    gpushare_mps)
      start_gpushared true 4 ""
      run_phase gpushare_mps "$hook GPUSHARE_CLIENT=train" "$hook GPUSHARE_CLIENT=infer"; stop_gpushared ;;
    gpushare_mps_priority)
      start_gpushared true 4 'mps_priority = "below-normal"'
      run_phase gpushare_mps_priority "$hook GPUSHARE_CLIENT=train" "$hook GPUSHARE_CLIENT=infer"; stop_gpushared ;;
    gpushare_mps_isolated)  # below-normal priority and at most half of the SMs for the trainers
      start_gpushared true 4 'mps_priority = "below-normal"
mps_thread_percentage = 50'
      run_phase gpushare_mps_isolated "$hook GPUSHARE_CLIENT=train" "$hook GPUSHARE_CLIENT=infer"; stop_gpushared ;;
  esac
done

python3 - "$out" <<'PY' | tee "$outdir/latency_summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
inf = {r["phase"]: r for r in rows if r["name"] == "infer"}
solo = inf.get("solo")
out = {}
for phase, r in inf.items():
    t = [x for x in rows if x["phase"] == phase and x["name"].startswith("train.")]
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
