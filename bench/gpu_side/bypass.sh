#!/bin/bash
# Verify, do not trust: processes attached through the hook that reach the real driver around it
# are reported by gpushared (gpu.violations), and processes that do not are not.
#
# bypass.c attaches through libgpushare.so like any CUDA program, then goes around it by one of
# two routes: "elf" calls the entry points of the libcuda.so.1 already loaded, found in its
# .dynsym (no dlsym for the hook to step in), "dlmopen" loads a private second copy of
# libcuda.so.1 in a new link-map namespace. For each route it runs
#   control   256 MiB and a spinning kernel through the hook       -> must not be reported
#   memory    4 GiB allocated around the hook                        -> a "memory" violation
#   activity  a spinning kernel around the hook, never a lease       -> an "activity" violation
# and, when PyTorch is there, a PyTorch control (matmuls under the hook) -> must not be reported;
# for each control it records what NVML counts for the process against what the hook reserved,
# which is the context overhead gpu.context_allowance (default 1 GiB) must cover.
#
# Run as root from the repository root, with the binaries built (cargo build --release
# --workspace), gcc and nvidia-smi installed, on a GPU no one else uses:
#     bench/gpu_side/bypass.sh > bypass.jsonl
# Environment: GPUSHARE_BIN (default target/release), PYTHON (with torch, optional; default
# python3), NVML_LIB (libnvidia-ml.so.1 path, default: the system's), SECONDS_EACH (default 12),
# KEEP=1 keeps the work directory (the daemon's log is gpushared.log there).
# Output: JSON lines, one per check ({"check": ..., "ok": ...}), then a summary line. Takes about
# 2-3 minutes.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${GPUSHARE_BIN:-$ROOT/target/release}
HOOK=$BIN/libgpushare.so
PYTHON=${PYTHON:-python3}
EACH=${SECONDS_EACH:-12}
WORK=$(mktemp -d /tmp/gpushare-bypass.XXXXXX)
chmod 755 "$WORK"
SOCK=$WORK/run/gpushare.sock
CFG=$WORK/gpushare.toml
DLOG=$WORK/gpushared.log
CHECKS=()
DPID=

# shellcheck source=checks.sh
. "$(dirname "$0")/checks.sh"

wait_until() { # wait_until SECONDS CMD...: 0 once CMD succeeds, 1 at the deadline
    local end=$((SECONDS + $1))
    shift
    until "$@"; do
        [ $SECONDS -ge $end ] && return 1
        sleep 0.1
    done
}

nvml_used_mib() { # the memory NVML counts for a pid, in MiB
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
        awk -F', *' -v pid="$1" '$1 == pid { print $2; found = 1 } END { if (!found) print "null" }'
}

finish() {
    local ok=true c
    for c in "${CHECKS[@]}"; do [ "${c#*=}" = true ] || ok=false; done
    if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
        kill -TERM "$DPID" 2>/dev/null
        wait_until 20 bash -c "! kill -0 $DPID 2>/dev/null"
    fi
    json summary=bypass ok=$ok checks="${CHECKS[*]}" seconds=$SECONDS work_dir="$WORK" \
        device="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap finish EXIT

# ---- preconditions ----
for f in "$BIN/gpushared" "$BIN/gpushare" "$HOOK"; do
    if [ ! -e "$f" ]; then
        check preconditions false missing="$f"
        exit 1
    fi
done
if ! gcc -O1 -Wall -o "$WORK/bypass" "$ROOT/bench/gpu_side/bypass.c" -ldl 2>"$WORK/gcc.err"; then
    check preconditions false error="gcc: $(tail -1 "$WORK/gcc.err")"
    exit 1
fi
TORCH=false
"$PYTHON" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && TORCH=true
json step=preconditions torch=$TORCH nvml_library="${NVML_LIB:-system}" seconds_each=$EACH

# Without MPS (activity is checked only then), one client for everything, scans every second.
cat >"$CFG" <<EOF
[daemon]
socket_dir = "$WORK/run"
[gpu]
nvml_library = "${NVML_LIB:-}"
set_compute_mode = false
mps = false
unattached = "warn"
violations = "warn"
scan_interval = "1s"
[clients.job]
users = ["*"]
EOF
"$BIN/gpushared" --config "$CFG" --bus none --log info >"$DLOG" 2>&1 &
DPID=$!
if ! wait_until 15 test -S "$SOCK"; then
    check daemon_starts false log_tail="$(tail -3 "$DLOG" | tr '\n' '|')"
    exit 1
fi

# run NAME CMD...: runs CMD under the hook as client "job" in the background; sets RUN_PID
run() {
    local name=$1
    shift
    GPUSHARE_SOCKET=$SOCK "$BIN/gpushare" run --hook "$HOOK" --name job -- "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" &
    RUN_PID=$!
}

# observe NAME PID: watches the daemon's log for a violation by PID while it runs (at most
# EACH + 10 s); sets REPORTED (the log line or empty), LATENCY (seconds from start) and PEAK_MIB
# (the most NVML counted for it)
observe() {
    local name=$1 pid=$2 t0=$SECONDS end=$((SECONDS + EACH + 10)) mib
    REPORTED=
    LATENCY=null
    PEAK_MIB=null
    while [ $SECONDS -lt $end ] && kill -0 "$pid" 2>/dev/null; do
        mib=$(nvml_used_mib "$pid")
        if [ "$mib" != null ] && { [ "$PEAK_MIB" = null ] || [ "$mib" -gt "$PEAK_MIB" ]; }; then
            PEAK_MIB=$mib
        fi
        if [ -z "$REPORTED" ]; then
            REPORTED=$(grep -E "process $pid \(uid" "$DLOG" | grep "around the hook" | head -1)
            [ -n "$REPORTED" ] && LATENCY=$((SECONDS - t0))
        fi
        sleep 0.5
    done
}

# ---- the C program, both routes ----
for route in elf dlmopen; do
    for mode in control memory activity; do
        run "$route-$mode" "$WORK/bypass" "$mode" "$route" "$EACH"
        wrapper=$RUN_PID
        wait_until 60 grep -qsE '"event": ?"(ready|error)"' "$WORK/$route-$mode.out"
        pid=$(field "$WORK/$route-$mode.out" ready pid)
        if [ "$pid" = null ]; then
            check "${route}_$mode" false error="$(cat "$WORK/$route-$mode.out" "$WORK/$route-$mode.err" | tail -3 | tr '\n' '|')"
            wait "$wrapper" 2>/dev/null
            continue
        fi
        observe "$route-$mode" "$pid"
        wait "$wrapper" 2>/dev/null
        error=$(field "$WORK/$route-$mode.out" error what)
        kind=null
        case "$REPORTED" in
        *"NVML counts"*) kind=memory ;;
        *"held no lease"*) kind=activity ;;
        esac
        taken=true
        if [ "$mode" = control ]; then
            ok=$([ -z "$REPORTED" ] && [ "$error" = null ] && echo true || echo false)
        elif [ "$error" != null ] && [ -z "$(field "$WORK/$route-$mode.out" bypass route)" -o \
            "$(field "$WORK/$route-$mode.out" bypass route)" = null ]; then
            # The route itself failed (say, no second copy of the driver in one process): there
            # is nothing around the hook to report.
            taken=false
            ok=$([ -z "$REPORTED" ] && echo true || echo false)
        else
            ok=$([ "$kind" = "$mode" ] && echo true || echo false)
        fi
        check "${route}_$mode" "$ok" pid="$pid" route_taken=$taken reported_kind=$kind latency_s=$LATENCY \
            nvml_peak_mib=$PEAK_MIB hooked_reserved_mib=$([ "$mode" = activity ] && echo 0 || echo 256) \
            route_error="$error" bypass_symbol_in="$(field "$WORK/$route-$mode.out" bypass cuMemAlloc_v2_in)" \
            launches="$(field "$WORK/$route-$mode.out" done launches)" log_line="$REPORTED"
    done
done

# ---- a PyTorch control: what NVML counts beyond what the hook reserved ----
if [ "$TORCH" = true ]; then
    cat >"$WORK/torch_control.py" <<'PY'
import json, os, sys, time
import torch
seconds = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
torch.cuda.synchronize()
print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
end = time.time() + seconds
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
print(json.dumps({"event": "done", "reserved_mib": torch.cuda.memory_reserved() >> 20}), flush=True)
PY
    run torch-control "$PYTHON" "$WORK/torch_control.py" "$EACH"
    wrapper=$RUN_PID
    wait_until 90 grep -qs '"event": "ready"' "$WORK/torch-control.out"
    pid=$(field "$WORK/torch-control.out" ready pid)
    observe torch-control "$pid"
    wait "$wrapper" 2>/dev/null
    reserved=$(field "$WORK/torch-control.out" done reserved_mib)
    check torch_control "$([ "$pid" != null ] && [ -z "$REPORTED" ] && echo true || echo false)" \
        pid="$pid" nvml_peak_mib=$PEAK_MIB torch_reserved_mib=$reserved log_line="$REPORTED" \
        error="$(tail -2 "$WORK/torch-control.err" | tr '\n' '|')"
fi

json step=daemon_log violations="$(grep -c 'around the hook' "$DLOG")" \
    unavailable="$(grep -E 'NVML gives no' "$DLOG" | tr '\n' '|')"
