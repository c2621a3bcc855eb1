#!/bin/bash
# Every GPU its own token and memory budget, on a machine with two or more GPUs: one saturating
# PyTorch job per GPU (8192² bf16 matmuls, synchronizing every 4), each of another client
# (requests 0.75 and 0.25 on a two-GPU machine, equal otherwise) and Unix user, run for SPAN
# seconds (default 20) once without gpushare and once under it; each job's rate under
# gpushare over its rate without (target >= 0.98 each). Then a process of a client capped at
# 8 GiB allocates 6 GiB on GPU 0 and 6 GiB on GPU 1 (both must succeed: the cap holds per GPU)
# and 3 GiB more on GPU 1 (must fail with OutOfMemoryError).
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
out["rates"] = {f"{p}/{n}": r for (p, n), r in jobs.items()}
out["cap"] = next((r for r in rows if r.get("name") == "cap8_two_gpus"), None)
print(json.dumps(out, indent=1))
PY
