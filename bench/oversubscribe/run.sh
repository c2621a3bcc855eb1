#!/bin/bash
# Oversubscription (unified memory) with hand-over prefetch and PyTorch cache release, side by
# side in one run:   bench/oversubscribe/run.sh [OUTPUT_DIR]     (run as root)
#
# JOBS PyTorch training jobs (train_job.py) share the GPU under gpushare with one lease at a
# time (QUANTUM each). Each oversubscribing client has a resident budget (RESIDENT) below its
# working set, so every hand-over moves memory out and only part of it back in bulk. Modes, each
# with a fresh daemon:
#   device            no oversubscription (device memory; the reference)
#   faults            managed memory moved out at hand-overs, back by page faults
#   prefetch          moved out and back in bulk (cuMemPrefetchAsync), up to the resident budget
#   faults_release, prefetch_release
#                     the same with release_cache (PyTorch's cached memory released while
#                     others wait)
# Every job's weights must come out as in a solo run without gpushare. Managed memory never
# exceeds what the card has free: the daemon's managed_memory pool is half of it.
# Needs python3 with torch; gpushared and libgpushare.so prebuilt in $TARGET (default
# target/release). Compute modes are not touched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
outdir=${1:-${OUT:-$here}}
out=$outdir/oversubscribe.jsonl
jobs=${JOBS:-3}
steps=${STEPS:-100}
width=${WIDTH:-6144}
layers=${LAYERS:-8}
quantum=${QUANTUM:-1s}
resident=${RESIDENT:-2560MiB}
modes=${MODES:-device faults prefetch faults_release prefetch_release}
job="python3 $here/train_job.py --steps $steps --width $width --layers $layers"
mkdir -p "$outdir"; : >"$out"
poller=""
trap '[[ -n $poller ]] && kill "$poller" 2>/dev/null; bench_cleanup' EXIT

free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
pool_mib=$((free_mib / 2))
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); free ${free_mib} MiB; managed pool ${pool_mib} MiB; jobs=$jobs steps=$steps width=$width layers=$layers quantum=$quantum resident=$resident" >>"$out"

$job solo --phase solo >>"$out"

gpushare_with() { # OVERSUBSCRIBE RELEASE
  {
    printf '[daemon]\nquantum = "%s"\nlease_grace = "2s"\n' "$quantum"
    gpu_toml false
    printf 'managed_memory = "%sMiB"\n' "$pool_mib"
  } >"$work/gpushare.toml"
  local i
  for i in $(seq "$jobs"); do
    cat >>"$work/gpushare.toml" <<TOML
[clients.job$i]
request = $(python3 -c "print(round(1 / $jobs - 0.001, 3))")
memory = "16GiB"
users = ["$(id -un)"]
oversubscribe = $1
$([[ $1 == true ]] && echo "resident = \"$resident\"")
release_cache = $2
TOML
  done
  gpushared_start "$work/gpushare.toml" "$outdir/oversubscribe.gpushared.log"
}

for mode in $modes; do
  echo "== $mode" >&2
  case $mode in
    device) over=false release=false prefetch=1 ;;
    faults) over=true release=false prefetch=out ;;
    prefetch) over=true release=false prefetch=1 ;;
    faults_release) over=true release=true prefetch=out ;;
    prefetch_release) over=true release=true prefetch=1 ;;
    *) echo "unknown mode $mode" >&2; continue ;;
  esac
  gpushare_with "$over" "$release" || continue
  (while sleep 0.25; do
     echo "{\"phase\":\"$mode\",\"t\":$(date +%s.%N),\"gpu_used_mib\":$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)}"
   done) >"$work/mem.$mode" &
  poller=$!
  pids=()
  for i in $(seq "$jobs"); do
    env $hook GPUSHARE_CLIENT=job$i GPUSHARE_PREFETCH=$prefetch PYTHONPATH=$root/dist/python \
      $job "job$i" --phase "$mode" >"$work/job.$mode.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
  kill "$poller"; wait "$poller" 2>/dev/null; poller=""
  cat "$work"/job."$mode".* "$work/mem.$mode" >>"$out"
  gpushared_stop
done

python3 - "$out" <<'PY' | tee "$outdir/oversubscribe_summary.json"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
solo = [r for r in rows if r.get("phase") == "solo" and "checksum" in r][0]
out = {"solo": {"steps_per_s": solo["steps_per_s"], "checksum": solo["checksum"],
                "max_reserved_bytes": solo["max_reserved"]}}
for phase in dict.fromkeys(r["phase"] for r in rows if r["phase"] != "solo"):
    jobs = [r for r in rows if r["phase"] == phase and "checksum" in r]
    mem = [r["gpu_used_mib"] for r in rows if r["phase"] == phase and "gpu_used_mib" in r]
    if not jobs:
        continue
    span = max(j["end"] for j in jobs) - min(j["start"] for j in jobs)
    out[phase] = {
        "jobs": len(jobs),
        "aggregate_steps_per_s": sum(j["steps"] for j in jobs) / span,
        "vs_solo": sum(j["steps"] for j in jobs) / span / solo["steps_per_s"],
        "gpu_used_mib_mean": statistics.mean(mem) if mem else None,
        "gpu_used_mib_max": max(mem) if mem else None,
        "all_correct": all(j["checksum"] == solo["checksum"] for j in jobs),
    }
print(json.dumps(out, indent=1))
PY
