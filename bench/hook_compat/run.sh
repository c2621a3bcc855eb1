#!/bin/bash
# Unmodified programs under the hook give the same results as without it:
#   bench/hook_compat/run.sh [OUTPUT_DIR]
# PyTorch (training a small MLP, deterministic; the same with its step captured in a CUDA
# graph with torch.cuda.graph and replayed), CuPy (matmul, a RawKernel), JAX (matmul) and an
# nvcc program launching through cudaLaunchKernelEx, each run plain and under the hook attached
# as a client with an 8 GiB cap, whose size the frameworks must see. Needs nvcc and python3
# with torch, cupy and jax (a framework that is missing is reported and skipped); gpushared and
# libgpushare.so prebuilt in $TARGET (default target/release). The GPU's settings are untouched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
outdir=${1:-${OUT:-$here}}
out=$outdir/hook_compat.jsonl
mkdir -p "$outdir"; : >"$out"
{ gpu_toml false; printf '[clients.capped]\nmemory = "8GiB"\nusers = ["*"]\n'; } >"$work/gpushare.toml"
DAEMON_LOG=info gpushared_start "$work/gpushare.toml" "$work/gpushared.log" || exit 1
export GPUSHARE_SOCKET=$work/run/gpushare.sock GPUSHARE_CLIENT=capped CUBLAS_WORKSPACE_CONFIG=:4096:8
preload=$target/libgpushare.so
tag() { python3 -c 'import json,sys; t=sys.argv[1]
for l in sys.stdin:
    l=l.strip()
    if l.startswith("{"): d=json.loads(l); d["run"]=t; print(json.dumps(d))' "$1"; }

nvcc -O2 -arch=sm_90 -o "$work/launch_ex" "$here/launch_ex.cu" 2>>"$out.err"
"$work/launch_ex" | tag plain >>"$out"
LD_PRELOAD=$preload "$work/launch_ex" | tag hook >>"$out"
for fw in torch torch_graph cupy jax; do
  python3 "$here/frameworks.py" $fw 2>>"$out.err" | tag plain >>"$out" || echo "{\"framework\":\"$fw\",\"run\":\"plain\",\"error\":\"failed, see hook_compat.jsonl.err\"}" >>"$out"
  LD_PRELOAD=$preload python3 "$here/frameworks.py" $fw 2>>"$out.err" | tag hook >>"$out" || echo "{\"framework\":\"$fw\",\"run\":\"hook\",\"error\":\"failed\"}" >>"$out"
done
python3 - "$out" <<'PY' | tee "$outdir/hook_compat_summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
out = {}
for key in ["launch_ex", "torch", "torch_graph", "cupy", "jax"]:
    r = {x["run"]: x for x in rows if x.get("bench") == key or x.get("framework") == key}
    p, h = r.get("plain", {}), r.get("hook", {})
    same = {k: p.get(k) == h.get(k) for k in p if k not in ("run", "mem_total", "bytes_limit", "framework", "bench")}
    out[key] = {"plain": p, "hook": h, "identical": bool(same) and all(same.values())}
print(json.dumps(out, indent=1))
PY
echo "# gpushared log" >>"$out"; sed 's/^/#   /' "$work/gpushared.log" | tail -30 >>"$out"
