#!/bin/bash
# Share accuracy and work conservation on a real GPU, side by side in one run:
#   bench/share/run.sh [OUTPUT_DIR]
# Saturating bf16 matmul jobs (PyTorch) run alone without the hook (their solo rate), alone under
# the hook with a small request (work conservation), two at once with requests 0.7/0.3, three with
# 0.5/0.3/0.2, and two at once without the hook (default time-slicing). A job's share is its rate
# in the contended window divided by its solo rate. Needs python3 with torch; gpushared and
# libgpushare.so prebuilt in $TARGET (default target/release). The GPU's settings are untouched.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${TARGET:-$root/target/release}
outdir=${1:-${OUT:-$here}}
out=$outdir/share.jsonl
quantum=${QUANTUM:-20ms}
span=${SPAN:-20}
mkdir -p "$outdir"
: >"$out"

work=$(mktemp -d)
daemon=""
cleanup() { [[ -n $daemon ]] && kill "$daemon" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
cat >"$work/gpushare.toml" <<TOML
[daemon]
quantum = "$quantum"
[gpu]
nvml = false
set_compute_mode = false
[clients.r70]
request = 0.7
users = ["*"]
[clients.r30]
request = 0.3
users = ["*"]
TOML
"$target/gpushared" --config "$work/gpushare.toml" --socket-dir "$work/run" --bus none --log info 2>"$work/gpushared.log" &
daemon=$!
for _ in $(seq 100); do [[ -S $work/run/gpushare.sock ]] && break; sleep 0.1; done
export GPUSHARE_SOCKET=$work/run/gpushare.sock
hook=$target/libgpushare.so
job() { python3 "$here/matmul_job.py" "$@" >>"$out"; }
hooked() { local client=$1; shift; GPUSHARE_CLIENT=$client LD_PRELOAD=$hook python3 "$here/matmul_job.py" "$@" >>"$out"; }
now() { python3 -c 'import time; print(time.time())'; }
until_in() { python3 -c "import time; print(time.time() + $1)"; }

echo "# $(date -u +%FT%TZ) quantum=$quantum $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" >>"$out"
# solo rate, no hook
job ref --phase solo --until "$(until_in 10)"
# alone under the hook, request 0.3 (the other client idle): work conservation
hooked r30 ref.lone --phase lone --until "$(until_in 12)"
# two saturating jobs, requests 0.7 / 0.3
u=$(until_in $((span + 6)))
hooked r70 ref.r70 --phase pair --until "$u" & p1=$!
hooked r30 ref.r30 --phase pair --until "$u" & p2=$!
wait $p1 $p2
# three jobs 0.5 / 0.3 / 0.2 through a fresh config (reloaded on SIGHUP)
sed -i 's/request = 0.7/request = 0.5/' "$work/gpushare.toml"
printf '[clients.r20]\nrequest = 0.2\nusers = ["*"]\n' >>"$work/gpushare.toml"
kill -HUP "$daemon"; sleep 1
u=$(until_in $((span + 8)))
hooked r70 ref.r50 --phase triple --until "$u" & p1=$!
hooked r30 ref.r30 --phase triple --until "$u" & p2=$!
hooked r20 ref.r20 --phase triple --until "$u" & p3=$!
wait $p1 $p2 $p3
# two jobs without the hook: the driver's default time-slicing
u=$(until_in $((span + 6)))
job ref.plainA --phase plain --until "$u" & p1=$!
job ref.plainB --phase plain --until "$u" & p2=$!
wait $p1 $p2
python3 "$here/analyze.py" "$out" | tee "$outdir/share_summary.json"
echo "# gpushared log:" >>"$out"
sed 's/^/#   /' "$work/gpushared.log" | tail -50 >>"$out"
