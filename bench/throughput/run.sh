#!/bin/bash
# Aggregate throughput of N concurrent jobs, side by side in one run:
#   bench/throughput/run.sh [OUTPUT_DIR]     (run as root)
# Two workloads (WORKLOADS): `matmul`, 1024x1024 fp32 matmul loops (bench/share/matmul_job.py),
# and `mlp`, small-MLP training loops (mlp_job.py), each N = 4 and 8 at once (COUNTS) under the
# driver's default time-slicing, plain MPS, and gpushare: without MPS (one lease at a time),
# under MPS with one lease at a time, and under MPS with as many concurrent leases as jobs
# (MODES picks among timeslice mps gpushare gpushare_mps gpushare_mps_concurrent).
# Total work per second = the sum of the jobs' rates over the window where all run; each
# workload's reference is one job alone. Needs python3 with torch and the MPS binaries (MPS_BIN,
# default /usr/local/nvidia/bin); gpushared and libgpushare.so prebuilt in $TARGET (default
# target/release). Compute modes are not touched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
outdir=${1:-${OUT:-$here}}
out=$outdir/throughput.jsonl
span=${SPAN:-10}
counts=${COUNTS:-4 8}
workloads=${WORKLOADS:-matmul mlp}
modes=${MODES:-timeslice mps gpushare gpushare_mps gpushare_mps_concurrent}
mkdir -p "$outdir"; : >"$out"

job() { # WORKLOAD: the job's command, to be followed by its name and options
  case $1 in
    matmul) echo "python3 $root/bench/share/matmul_job.py --size 1024 --dtype float32 --every 16" ;;
    mlp) echo "python3 $here/mlp_job.py" ;;
  esac
}
run_jobs() { # WORKLOAD MODE N [env...]: N jobs at once, phase WORKLOAD.MODE.nN
  local w=$1 mode=$2 n=$3 u i pids=()
  shift 3
  u=$(at $((span + 6 + n / 2)))
  for i in $(seq "$n"); do
    # each job writes its own file: lines this long interleave when appended at once
    env "$@" $(job "$w") "$w.$mode.$i" --phase "$w.$mode.n$n" --until "$u" >"$work/job.$w.$mode.$n.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
  cat "$work/job.$w.$mode.$n".* >>"$out"
}
gpushare_with() { # MPS CONCURRENT_LEASES
  { printf '[daemon]\nconcurrent_leases = %s\n' "$2"; gpu_toml "$1"; printf '[defaults]\nrequest = 0.0\n'; } >"$work/gpushare.toml"
  gpushared_start "$work/gpushare.toml" "$outdir/throughput.gpushared.log"
}

header >>"$out"
for w in $workloads; do $(job "$w") "$w.solo" --phase "$w.solo" --until "$(at 14)" >>"$out"; done
for mode in $modes; do
  echo "== $mode" >&2
  for n in $counts; do
    case $mode in
      timeslice) ;;
      mps) [[ -n $mps_up ]] || mps_start ;;
      gpushare) gpushare_with false 1 ;;
      gpushare_mps) gpushare_with true 1 ;;
      gpushare_mps_concurrent) gpushare_with true "$n" ;;
      *) echo "no mode $mode" >&2; continue ;;
    esac
    for w in $workloads; do
      if [[ $mode == gpushare* ]]; then run_jobs "$w" "$mode" "$n" $hook; else run_jobs "$w" "$mode" "$n"; fi
    done
    gpushared_stop
  done
  [[ -n $mps_up ]] && mps_stop
done

python3 - "$out" <<'PY' | tee "$outdir/throughput_summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def rate(s, t0, t1):
    x = [(t, n) for t, n in s if t0 <= t <= t1]
    return (x[-1][1] - x[0][1]) / (x[-1][0] - x[0][0]) if len(x) > 1 else 0.0
out = {}
solo = {}
for r in rows:
    w, mode = r["phase"].split(".")[:2]
    if mode == "solo":
        s = r["samples"]
        solo[w] = rate(s, s[0][0] + 1, s[-1][0] - 0.5)
out["solo_rate"] = solo
for phase in dict.fromkeys(r["phase"] for r in rows):
    w, mode, *n = phase.split(".")
    if mode == "solo":
        continue
    rs = [r for r in rows if r["phase"] == phase]
    t0 = max(r["samples"][0][0] for r in rs) + 2
    t1 = min(r["samples"][-1][0] for r in rs) - 1
    total = sum(rate(r["samples"], t0, t1) for r in rs)
    out[phase] = {"workload": w, "mode": mode, "jobs": len(rs), "total_rate": total,
                  "vs_solo": total / solo[w] if solo.get(w) else None}
for k, v in list(out.items()):
    if k == "solo_rate":
        continue
    for ref in ("timeslice", "mps"):
        base = out.get(f"{v['workload']}.{ref}.n{v['jobs']}", {}).get("total_rate")
        if base:
            v[f"vs_{ref}"] = v["total_rate"] / base
print(json.dumps(out, indent=1))
PY
