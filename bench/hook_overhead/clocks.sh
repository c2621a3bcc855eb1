#!/bin/bash
# Which launch-path clock the hook should use on this machine: the kernel's clocksource, the
# CPU's TSC flags, and 1e6 empty-kernel launches plain, under the hook with its default clock,
# and under the hook with GPUSHARE_CLOCK=tsc and =monotonic, in alternating rounds.
#   bench/hook_overhead/clocks.sh [OUTPUT.jsonl]   (TARGET: gpushared and libgpushare.so)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
target=${TARGET:-$here/../../target/release}
out=${1:-$here/clocks.jsonl}
rounds=${ROUNDS:-4}
work=$(mktemp -d)
daemon=""
cleanup() { [[ -n $daemon ]] && kill "$daemon" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
{
  echo "# clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
  echo "# tsc flags: $(grep -o -w -E 'constant_tsc|nonstop_tsc|tsc_reliable' /proc/cpuinfo | sort -u | tr '\n' ' ')"
} >>"$out"
printf '[gpu]\nnvml = false\nset_compute_mode = false\n' >"$work/gpushare.toml"
"$target/gpushared" --config "$work/gpushare.toml" --socket-dir "$work/run" --bus none --log warn &
daemon=$!
for _ in $(seq 100); do [[ -S $work/run/gpushare.sock ]] && break; sleep 0.1; done
export GPUSHARE_SOCKET=$work/run/gpushare.sock
nvcc -O2 -o "$work/launch_loop" "$here/launch_loop.cu"
for r in $(seq "$rounds"); do
  "$work/launch_loop" 1000000 "plain.$r" >>"$out"
  LD_PRELOAD=$target/libgpushare.so "$work/launch_loop" 1000000 "hook-default.$r" >>"$out"
  GPUSHARE_CLOCK=tsc LD_PRELOAD=$target/libgpushare.so "$work/launch_loop" 1000000 "hook-tsc.$r" >>"$out"
  GPUSHARE_CLOCK=monotonic LD_PRELOAD=$target/libgpushare.so "$work/launch_loop" 1000000 "hook-monotonic.$r" >>"$out"
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = {}
for kind in ("plain", "hook-default", "hook-tsc", "hook-monotonic"):
    med[kind] = statistics.median(r["ns_per_launch"] for r in rows if r["label"].split(".")[0] == kind)
print(json.dumps({k: {"median_ns": v, "ratio": v / med["plain"]} for k, v in med.items()}))
PY
