#!/bin/bash
# Every GPU its own token and memory budget, on a machine with two or more GPUs: one saturating
# PyTorch job per GPU (8192² bf16 matmuls, synchronizing every 4), each of another client
# (requests 0.75 and 0.25 on a two-GPU machine, equal otherwise) and Unix user, run for SPAN
# seconds (default 20) once without gpushare and once under it; each job's rate under
# gpushare over its rate without (target >= 0.98 each). Then a process of a client capped at
# 8 GiB allocates 6 GiB on GPU 0 and 6 GiB on GPU 1 (both must succeed: the cap holds per GPU)
# and 3 GiB more on GPU 1 (must fail with OutOfMemoryError).
# Then one process driving every GPU, a thread per GPU (threads_job.py, client c0): without
# gpushare, under it alone (target >= 0.95 of its rate without on each GPU) and beside a job of
# client c1 on GPU 0 (GPU 0 shared by the requests, GPU 1 its own).
#   bench/multi_gpu/run.sh [OUTPUT_DIR]
# Needs python3 with torch, two or more GPUs; gpushared and libgpushare.so prebuilt in $TARGET
# (default target/release); users gsbench1.. are created when missing. Writes
# OUTPUT_DIR/multi_gpu.jsonl and multi_gpu_summary.json. The GPUs' settings are untouched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
# shellcheck source=../users.sh
. "$here/../users.sh"
outdir=${1:-${OUT:-$here}}
out=$outdir/multi_gpu.jsonl
span=${SPAN:-20}
mkdir -p "$outdir"
header >"$out"
gpus=$(nvidia-smi -L | grep -c '^GPU ')
if ((gpus < 2)); then
  json_line error="this machine has $gpus GPU; the scenario needs two or more" >>"$out"
  exit 0
fi
bench_users $(for g in $(seq 1 "$gpus"); do echo "gsbench$g"; done) >>"$out" || exit 1
bench_copy "$root/bench/share/matmul_job.py"
job() { # MODE GPU: the job on GPU (CUDA_VISIBLE_DEVICES), as user gsbench(GPU+1)
  local mode=$1 g=$2 env_hook=""
  [[ $mode == gpushare ]] && env_hook="$uhook GPUSHARE_CLIENT=c$g"
  as_user "gsbench$((g + 1))" env $env_hook CUDA_VISIBLE_DEVICES="$g" \
    "$py" "$jobdir/matmul_job.py" "gpu$g" --phase "$mode" --size 8192 --every 4 --until "$until"
}
for mode in plain gpushare; do
  if [[ $mode == gpushare ]]; then
    {
      echo '[daemon]'
      gpu_toml false
      for g in $(seq 0 $((gpus - 1))); do
        if ((gpus == 2)); then r=$([[ $g == 0 ]] && echo 0.75 || echo 0.25); else r=$(python3 -c "print(round(1/$gpus, 3))"); fi
        printf '[clients.c%s]\nrequest = %s\nusers = ["gsbench%s"]\n' "$g" "$r" "$((g + 1))"
      done
      printf '[clients.cap8]\nmemory = "8GiB"\nusers = ["*"]\n'
    } >"$work/gpushare.toml"
    gpushared_start "$work/gpushare.toml" "$outdir/multi_gpu.gpushared.log" || exit 1
  fi
  until=$(at "$span")
  pids=()
  for g in $(seq 0 $((gpus - 1))); do
    job "$mode" "$g" >"$work/$mode.$g" 2>"$work/$mode.$g.err" &
    pids+=($!)
  done
  wait "${pids[@]}"
  cat "$work/$mode".? >>"$out"
  for f in "$work/$mode".?.err; do sed "s|^|# $(basename "$f"): |" "$f" | grep -i "gpushare\|error" >>"$out"; done
done
# One process driving every GPU, a thread per GPU (threads_job.py), as gsbench1 (client c0):
# without gpushare, under it alone, and under it beside a job of gsbench2 (client c1) on GPU 0.
bench_copy "$here/threads_job.py"
one() { # PHASE [hook]
  local env_hook=""
  [[ ${2:-} == hook ]] && env_hook="$uhook GPUSHARE_CLIENT=c0"
  as_user gsbench1 env $env_hook "$py" "$jobdir/threads_job.py" one --phase "$1" --size 8192 \
    --every 4 --until "$until"
}
for phase in one_plain one_gpushare one_contended; do
  until=$(at "$span")
  other=""
  if [[ $phase == one_contended ]]; then
    as_user gsbench2 env $uhook GPUSHARE_CLIENT=c1 CUDA_VISIBLE_DEVICES=0 "$py" "$jobdir/matmul_job.py" \
      gpu0-beside --phase "$phase" --size 8192 --every 4 --until "$until" >"$work/$phase.other" \
      2>"$work/$phase.other.err" &
    other=$!
  fi
  one "$phase" $([[ $phase == one_plain ]] || echo hook) >"$work/$phase" 2>"$work/$phase.err"
  [[ -n $other ]] && wait "$other" && cat "$work/$phase.other" >>"$out"
  cat "$work/$phase" >>"$out"
  sed "s|^|# $phase.err: |" "$work/$phase.err" | grep -i "gpushare\|error" >>"$out"
done
env $hook GPUSHARE_CLIENT=cap8 python3 - >>"$out" 2>"$work/cap.err" <<'PY'
import json, torch
gib = 1 << 30
held, steps = [], []
for dev, n in ((0, 6), (1, 6), (1, 3)):
    try:
        held.append(torch.empty(n * gib, dtype=torch.uint8, device=f"cuda:{dev}"))
        steps.append([dev, n, "ok"])
    except torch.cuda.OutOfMemoryError as e:
        steps.append([dev, n, "OutOfMemoryError: " + str(e).split(".")[0]])
print(json.dumps({"name": "cap8_two_gpus", "steps": steps,
                  "mem_get_info": [torch.cuda.mem_get_info(d) for d in (0, 1)]}))
PY
sed "s|^|# cap.err: |" "$work/cap.err" | grep -i "gpushare\|error" >>"$out"
python3 - "$out" <<'PY' | tee "$outdir/multi_gpu_summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def rate(s):
    s = [p for p in s if p[0] >= s[0][0] + 2]  # past the start-up
    return (s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0]) if len(s) > 1 else None
jobs = {(r["phase"], r["name"]): rate(r["samples"]) for r in rows if "samples" in r}
out = {"ratio": {}}
for (phase, name), r in sorted(jobs.items()):
    if phase == "gpushare" and jobs.get(("plain", name)):
        out["ratio"][name] = r / jobs[("plain", name)]
for name in {n for (_, n) in jobs}:  # one process on every GPU: its rate over its rate plain
    for phase in ("one_gpushare", "one_contended"):
        if jobs.get((phase, name)) and jobs.get(("one_plain", name)):
            out["ratio"][f"{phase}/{name}"] = jobs[(phase, name)] / jobs[("one_plain", name)]
out["rates"] = {f"{p}/{n}": r for (p, n), r in jobs.items()}
out["cap"] = next((r for r in rows if r.get("name") == "cap8_two_gpus"), None)
print(json.dumps(out, indent=1))
PY
