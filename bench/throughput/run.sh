#!/bin/bash
# Aggregate throughput of N concurrent medium jobs (1024x1024 fp32 matmul loops, PyTorch) under
# the driver's default time-slicing, plain MPS, and gpushare (without MPS, with MPS and one lease
# at a time, with MPS and as many concurrent leases as jobs), side by side
# in one run:   bench/throughput/run.sh [OUTPUT_DIR]     (run as root)
# Total work per second = the sum of the jobs' rates over the window where all run. Needs
# python3 with torch and the MPS binaries (MPS_BIN, default /usr/local/nvidia/bin); gpushared and
# libgpushare.so prebuilt in $TARGET (default target/release). Compute modes are not touched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${TARGET:-$root/target/release}
outdir=${1:-${OUT:-$here}}
out=$outdir/throughput.jsonl
span=${SPAN:-12}
counts=${COUNTS:-4 8}
mps_bin=${MPS_BIN:-/usr/local/nvidia/bin}
job=$root/bench/share/matmul_job.py
mkdir -p "$outdir"; : >"$out"
work=$(mktemp -d); chmod 755 "$work"
daemon=""
cleanup() { [[ -n $daemon ]] && kill "$daemon" 2>/dev/null; sleep 1; rm -rf "$work"; }
trap cleanup EXIT
until_in() { python3 -c "import time; print(time.time() + $1)"; }

run_jobs() { # MODE N [env...]: N jobs at once, each tagged with the mode
  local mode=$1 n=$2; shift 2
  local u; u=$(until_in $((span + 8)))
  local pids=()
  for i in $(seq "$n"); do
    # each job writes its own file: lines this long interleave when appended at once
    env "$@" python3 "$job" "$mode.$i" --phase "$mode.n$n" --until "$u" --size 1024 --dtype float32 --every 16 >"$work/job.$mode.$n.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
  cat "$work"/job."$mode"."$n".* >>"$out"
}

echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader)" >>"$out"
python3 "$job" ref --phase solo --until "$(until_in 16)" --size 1024 --dtype float32 --every 16 >>"$out"
for n in $counts; do run_jobs timeslice "$n"; done

# plain MPS with its own pipe directory
export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
PATH=$mps_bin:$PATH nvidia-cuda-mps-control -d
sleep 1
for n in $counts; do run_jobs mps "$n"; done
echo quit | PATH=$mps_bin:$PATH nvidia-cuda-mps-control
sleep 2
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

start_gpushared() { # MPS(true|false) CONCURRENT_LEASES
  cat >"$work/gpushare.toml" <<TOML
[daemon]
concurrent_leases = ${2:-1}
[gpu]
nvml = false
set_compute_mode = false
mps = $1
mps_control = "$mps_bin/nvidia-cuda-mps-control"
mps_pipe_dir = "$work/gs-pipe"
mps_log_dir = "$work/gs-log"
[defaults]
request = 0.0
TOML
  "$target/gpushared" --config "$work/gpushare.toml" --socket-dir "$work/run" --bus none --log warn 2>>"$outdir/throughput.gpushared.log" &
  daemon=$!
  for _ in $(seq 100); do [[ -S $work/run/gpushare.sock ]] && break; sleep 0.1; done
  sleep 1
}
stop_gpushared() { kill "$daemon"; wait "$daemon" 2>/dev/null; daemon=""; sleep 2; }

start_gpushared false
for n in $counts; do run_jobs gpushare "$n" LD_PRELOAD="$target/libgpushare.so" GPUSHARE_SOCKET="$work/run/gpushare.sock"; done
stop_gpushared
start_gpushared true
for n in $counts; do run_jobs gpushare_mps "$n" LD_PRELOAD="$target/libgpushare.so" GPUSHARE_SOCKET="$work/run/gpushare.sock"; done
stop_gpushared
# under MPS with as many concurrent leases as jobs
for n in $counts; do
  start_gpushared true "$n"
  run_jobs gpushare_mps_concurrent "$n" LD_PRELOAD="$target/libgpushare.so" GPUSHARE_SOCKET="$work/run/gpushare.sock"
  stop_gpushared
done

python3 - "$out" <<'PY' | tee "$outdir/throughput_summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def rate(s, t0, t1):
    x = [(t, n) for t, n in s if t0 <= t <= t1]
    return (x[-1][1] - x[0][1]) / (x[-1][0] - x[0][0]) if len(x) > 1 else 0.0
solo = [r for r in rows if r["phase"] == "solo"][0]["samples"]
solo_rate = rate(solo, solo[0][0] + 1, solo[-1][0] - 0.5)
out = {"solo_rate": solo_rate}
for phase in sorted({r["phase"] for r in rows} - {"solo"}):
    rs = [r for r in rows if r["phase"] == phase]
    t0 = max(r["samples"][0][0] for r in rs) + 2
    t1 = min(r["samples"][-1][0] for r in rs) - 1
    total = sum(rate(r["samples"], t0, t1) for r in rs)
    out[phase] = {"jobs": len(rs), "total_rate": total, "vs_solo": total / solo_rate}
for n in sorted({v["jobs"] for k, v in out.items() if isinstance(v, dict)}):
    for ref in ("timeslice", "mps"):
        base = out.get(f"{ref}.n{n}", {}).get("total_rate")
        for k, v in out.items():
            if isinstance(v, dict) and v["jobs"] == n and base:
                v[f"vs_{ref}"] = v["total_rate"] / base
print(json.dumps(out, indent=1))
PY
