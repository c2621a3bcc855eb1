#!/bin/bash
# The GPU side on a real NVIDIA GPU: gpushared starts and supervises MPS, four PyTorch jobs share
# it, an MPS thread percentage of 30 is measurably slower than 100, a process without the hook is
# reported within 5 s, two Unix users are serialized by MPS as gpushared(8) says, a killed MPS
# control daemon is restarted, and stop leaves no MPS process behind.
#
# Run as root from the repository root, with the binaries built (target/release: gpushared,
# gpushare, libgpushare.so). Compute modes are not touched (set_compute_mode = false).
# Environment: MPS_BIN (default /usr/local/nvidia/bin), PYTHON (with torch; default python3),
# GPUSHARE_BIN (default target/release), GPUSHARE_HOOK (default $GPUSHARE_BIN/libgpushare.so),
# NVML_LIB (libnvidia-ml.so.1 path, default: the system's), KEEP=1 keeps the work directory.
# Output: JSON lines, one per check ({"check": ..., "ok": ...}), then a summary line.
# Takes about 2-4 minutes; each step has its own timeout and the whole run stops at 7 minutes.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${GPUSHARE_BIN:-$ROOT/target/release}
MPS_BIN=${MPS_BIN:-/usr/local/nvidia/bin}
PYTHON=${PYTHON:-python3}
HOOK=${GPUSHARE_HOOK:-$BIN/libgpushare.so}
JOB=$ROOT/bench/gpu_side/job.py
SIZE=${SIZE:-8192}
BUDGET=420
export PATH=$MPS_BIN:$PATH

WORK=$(mktemp -d /tmp/gpushare-gpu-side.XXXXXX)
chmod 755 "$WORK"
cp "$JOB" "$WORK/job.py" && chmod 644 "$WORK/job.py"
SOCK_DIR=$WORK/run
SOCK=$SOCK_DIR/gpushare.sock
PIPE=$WORK/mps-pipe
LOGD=$WORK/mps-log
CFG=$WORK/gpushare.toml
DLOG=$WORK/gpushared.log
CHECKS=()
DPID=

# ---- helpers ----
# shellcheck source=checks.sh
. "$(dirname "$0")/checks.sh"

calc() { python3 -c "import sys; print($1)"; }

mps_ctl() {
    echo "$1" | CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$LOGD \
        timeout 5 "$MPS_BIN/nvidia-cuda-mps-control" 2>/dev/null
}

mps_client_count() {
    local n=0 s
    for s in $(mps_ctl get_server_list | grep -E '^[0-9]+$'); do
        n=$((n + $(mps_ctl "get_client_list $s" | grep -cE '^[0-9]+$')))
    done
    echo $n
}

control_pid() { # the nvidia-cuda-mps-control child of gpushared
    local p
    [ -n "$DPID" ] || return 1
    for p in $(pgrep -P "$DPID"); do
        if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q 'nvidia-cuda-mps-control -f'; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

our_mps_processes() { # MPS control daemons and servers that use our pipe directory
    local p
    for p in $(pgrep -f nvidia-cuda-mps); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "CUDA_MPS_PIPE_DIRECTORY=$PIPE" && echo "$p"
    done
}

wait_until() { # wait_until SECONDS COMMAND...: 0 once COMMAND succeeds
    local end=$((SECONDS + $1))
    shift
    while [ $SECONDS -lt $end ]; do
        "$@" && return 0
        sleep 0.2
    done
    return 1
}

# job TAG MODE ITER HOLD [USER] [CLIENT] [THREAD_PCT]: starts a job in the background (its pid in
# JOB_PID), output in $WORK/TAG.out. MODE: hook (gpushare run, the hook tells it the MPS settings), env (MPS variables
# set directly, no hook), plain (neither: bypasses gpushare and MPS).
job() {
    local tag=$1 mode=$2 iter=$3 hold=$4 user=${5:-} client=${6:-} pct=${7:-}
    local -a cmd=(env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE -u LD_PRELOAD)
    case $mode in
    hook) cmd+=(GPUSHARE_SOCKET="$SOCK" GPUSHARE_HOOK="$HOOK" "$BIN/gpushare" run ${client:+--name "$client"} --) ;;
    env) cmd+=(CUDA_MPS_PIPE_DIRECTORY="$PIPE" ${pct:+CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct}) ;;
    plain) ;;
    esac
    cmd+=("$PYTHON" "$WORK/job.py" "$tag" "$iter" "$SIZE" "$hold")
    if [ -n "$user" ]; then
        cmd=(runuser -u "$user" -- env HOME=/tmp "${cmd[@]}")
    fi
    (cd "$WORK" && exec timeout 120 "${cmd[@]}") >"$WORK/$tag.out" 2>"$WORK/$tag.err" &
    JOB_PID=$!
}

join_comma() {
    local IFS=,
    echo "$*"
}

finish() {
    local ok=true c
    for c in "${CHECKS[@]}"; do [ "${c#*=}" = true ] || ok=false; done
    if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
        kill -TERM "$DPID" 2>/dev/null
        wait_until 20 bash -c "! kill -0 $DPID 2>/dev/null"
    fi
    json summary=gpu_side ok=$ok checks="${CHECKS[*]}" seconds=$SECONDS work_dir="$WORK" \
        device="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap finish EXIT

out_of_time() {
    if [ $SECONDS -ge $BUDGET ]; then
        check time_budget false seconds=$SECONDS
        exit 1
    fi
}

# ---- preconditions ----
for f in "$BIN/gpushared" "$BIN/gpushare" "$MPS_BIN/nvidia-cuda-mps-control" "$MPS_BIN/nvidia-cuda-mps-server"; do
    if [ ! -x "$f" ]; then
        check preconditions false missing="$f"
        exit 1
    fi
done
HOOK_MODE=hook
[ -f "$HOOK" ] || HOOK_MODE=env
if ! "$PYTHON" -c 'import torch; assert torch.cuda.is_available()' 2>"$WORK/torch.err"; then
    check preconditions false error="$PYTHON cannot use torch with CUDA: $(tail -1 "$WORK/torch.err")"
    exit 1
fi
if [ -z "${NVML_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1 '; then
    for d in "$MPS_BIN/../lib64" "$MPS_BIN/../lib" /usr/lib/x86_64-linux-gnu /usr/lib64; do
        if [ -e "$d/libnvidia-ml.so.1" ]; then
            NVML_LIB=$(readlink -f "$d/libnvidia-ml.so.1")
            break
        fi
    done
fi
json step=preconditions hook="$HOOK" client_mode=$HOOK_MODE python="$PYTHON" size=$SIZE \
    nvml_library="${NVML_LIB:-system}"

cat >"$CFG" <<EOF
[daemon]
socket_dir = "$SOCK_DIR"
[gpu]
nvml = true
nvml_library = "${NVML_LIB:-}"
set_compute_mode = false
mps = true
mps_control = "$MPS_BIN/nvidia-cuda-mps-control"
mps_pipe_dir = "$PIPE"
mps_log_dir = "$LOGD"
unattached = "warn"
scan_interval = "1s"
[clients.slow]
users = ["*"]
mps_thread_percentage = 30
[clients.fast]
users = ["*"]
mps_thread_percentage = 100
[clients.job]
users = ["*"]
EOF

# ---- 1. the daemon starts MPS ----
"$BIN/gpushared" --config "$CFG" --bus none --log info >"$DLOG" 2>&1 &
DPID=$!
t0=$SECONDS
wait_until 15 test -S "$SOCK"
socket_up=$?
wait_until 10 control_pid >/dev/null
CPID=$(control_pid)
wait_until 10 mps_ctl get_server_list >/dev/null
answers=$?
check daemon_starts_mps "$([ $socket_up = 0 ] && [ -n "$CPID" ] && [ $answers = 0 ] && echo true || echo false)" \
    daemon_pid=$DPID control_pid="${CPID:-null}" seconds=$((SECONDS - t0)) \
    control_answers=$([ $answers = 0 ] && echo true || echo false) \
    pipe_dir_mode="$(stat -c %a "$PIPE" 2>/dev/null)" log_tail="$(tail -3 "$DLOG" | tr '\n' '|')"

# ---- 2. four PyTorch jobs at once under MPS ----
out_of_time
pids=()
for i in 1 2 3 4; do
    job four$i "$HOOK_MODE" 1500 0 "" job
    pids+=("$JOB_PID")
done
max_clients=0
apps=
while pgrep -f "job.py four" >/dev/null; do
    n=$(mps_client_count)
    if [ "$n" -gt "$max_clients" ]; then
        max_clients=$n
        apps=$(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader 2>/dev/null | tr '\n' '|')
    fi
    sleep 0.5
done
ok=true
times=()
starts=()
ends=()
for i in 1 2 3 4; do
    wait "${pids[$((i - 1))]}" || ok=false
    times+=("$(field "$WORK/four$i.out" done compute_s)")
    starts+=("$(field "$WORK/four$i.out" done t_start)")
    ends+=("$(field "$WORK/four$i.out" done t_end)")
done
overlap=$(calc "max([$(join_comma "${starts[@]}")]) < min([$(join_comma "${ends[@]}")])" 2>/dev/null || echo False)
[ "$max_clients" -ge 4 ] || ok=false
[ "$overlap" = True ] || ok=false
check four_jobs_under_mps "$ok" client_mode=$HOOK_MODE mps_clients_seen=$max_clients \
    nvidia_smi_compute_apps="$apps" \
    overlapped="$overlap" compute_s="${times[*]}" \
    pipe_dir_seen_by_job="$(field "$WORK/four1.out" done mps_pipe_dir)" \
    errors="$(cat "$WORK"/four*.err 2>/dev/null | grep -v '^gpushare' | tail -2 | tr '\n' '|')"

# ---- 3. 30% of the SMs is slower than 100% (each job alone) ----
out_of_time
ITER=2000
for variant in env $([ "$HOOK_MODE" = hook ] && echo hook); do
    if [ "$variant" = hook ]; then
        job pct30_$variant hook $ITER 0 "" slow && wait "$JOB_PID"
        job pct100_$variant hook $ITER 0 "" fast && wait "$JOB_PID"
    else
        job pct30_$variant env $ITER 0 "" "" 30 && wait "$JOB_PID"
        job pct100_$variant env $ITER 0 "" "" 100 && wait "$JOB_PID"
    fi
    s30=$(field "$WORK/pct30_$variant.out" done compute_s)
    s100=$(field "$WORK/pct100_$variant.out" done compute_s)
    ratio=$(calc "round($s30 / $s100, 3)" 2>/dev/null || echo null)
    ok=$(calc "$ratio >= 1.5" 2>/dev/null | tr T t | tr F f)
    check "thread_percentage_$variant" "${ok:-false}" seconds_30=$s30 seconds_100=$s100 ratio=$ratio \
        env_seen_30="$(field "$WORK/pct30_$variant.out" done mps_thread_percentage)" \
        tflops_30="$(field "$WORK/pct30_$variant.out" done tflops)" tflops_100="$(field "$WORK/pct100_$variant.out" done tflops)"
done

# ---- 4. a process without the hook is reported within 5 s ----
out_of_time
for variant in plain env; do
    job bypass_$variant $variant 100 10
    p=$JOB_PID
    wait_until 60 grep -qs '"event": "ready"' "$WORK/bypass_$variant.out"
    vpid=$(field "$WORK/bypass_$variant.out" ready pid)
    t_ready=$(field "$WORK/bypass_$variant.out" ready t)
    detected=null
    end=$((SECONDS + 10))
    while [ $SECONDS -lt $end ]; do
        if grep -E "(process|pid)[ =]$vpid\b" "$DLOG" | grep -qi "without gpushare\|unattached"; then
            detected=$(date +%s.%N)
            break
        fi
        sleep 0.1
    done
    latency=$([ "$detected" = null ] && echo null || calc "round($detected - $t_ready, 2)")
    ok=$([ "$latency" != null ] && calc "$latency < 5" | tr T t | tr F f || echo false)
    check "unattached_reported_$variant" "$ok" pid="$vpid" latency_s=$latency \
        log_line="$(grep -E "\b$vpid\b" "$DLOG" | head -1)"
    kill "$p" 2>/dev/null
    wait "$p" 2>/dev/null
done

# ---- 5. two Unix users under MPS ----
out_of_time
for u in gpsa gpsb; do id "$u" >/dev/null 2>&1 || useradd -M -r -s /usr/sbin/nologin "$u"; done
if ! runuser -u gpsa -- "$PYTHON" -c 'import torch' 2>/dev/null; then
    # Let the test users reach the Python installation (this machine is scratch).
    for path in "$(readlink -f "$(command -v "$PYTHON")")" "$("$PYTHON" -c 'import torch, os; print(os.path.dirname(torch.__file__))')"; do
        d=$path
        while [ "$d" != / ]; do chmod o+rx "$d" 2>/dev/null; d=$(dirname "$d"); done
    done
    json step=two_users note="made the Python installation readable for other users"
fi
if runuser -u gpsa -- "$PYTHON" -c 'import torch' 2>"$WORK/users.err"; then
    # gpsa computes for a while and holds its context; gpsb starts 1 s after gpsa is ready.
    job user_a "$HOOK_MODE" 3000 2 gpsa job
    pa=$JOB_PID
    wait_until 60 grep -qs '"event": "ready"' "$WORK/user_a.out"
    sleep 1
    job user_b "$HOOK_MODE" 200 0 gpsb job
    pb=$JOB_PID
    wait "$pa"
    wait "$pb"
    a_exit=$(field "$WORK/user_a.out" exit t)
    b_ready=$(field "$WORK/user_b.out" ready t)
    b_launch=$(field "$WORK/user_b.out" ready t_launch)
    ok=$(calc "$b_ready >= $a_exit - 0.5" 2>/dev/null | tr T t | tr F f)
    check two_users_serialized "${ok:-false}" client_mode=$HOOK_MODE a_exit=$a_exit b_ready=$b_ready \
        b_waited_s="$(calc "round($b_ready - $b_launch, 2)" 2>/dev/null)" \
        b_ready_after_a_exit_s="$(calc "round($b_ready - $a_exit, 2)" 2>/dev/null)" \
        pipe_dir="$(ls -la "$PIPE" | tail -n +2 | tr -s ' ' | tr '\n' '|')" \
        errors="$(cat "$WORK"/user_*.err | grep -v '^gpushare' | tail -2 | tr '\n' '|')"
else
    check two_users_serialized false error="user gpsa cannot import torch: $(tail -1 "$WORK/users.err")"
fi

# ---- 6. a killed MPS control daemon is restarted ----
out_of_time
old=$(control_pid)
new_control() {
    local p
    p=$(control_pid) && [ "$p" != "$old" ]
}
if [ -n "$old" ]; then
    # Idle MPS servers from the steps above would outlive a killed control daemon; end them first.
    for s in $(mps_ctl get_server_list | grep -E '^[0-9]+$'); do mps_ctl "shutdown_server $s" >/dev/null; done
    wait_until 10 bash -c "[ -z \"\$(pgrep -f nvidia-cuda-mps-server)\" ]"
    kill -9 "$old"
    t0=$SECONDS
    wait_until 15 new_control
    new=$(control_pid)
    served=$(wait_until 10 mps_ctl get_server_list >/dev/null && echo true || echo false)
    check mps_restarted "$([ -n "$new" ] && [ "$new" != "$old" ] && [ "$served" = true ] && echo true || echo false)" \
        old_pid=$old new_pid="${new:-null}" seconds=$((SECONDS - t0)) answers=$served \
        log_line="$(grep -i "mps.*died\|restart" "$DLOG" | tail -1)"
else
    check mps_restarted false error="no MPS control daemon under gpushared"
fi

# ---- 7. stop quits MPS ----
kill -TERM "$DPID"
t0=$SECONDS
wait_until 30 bash -c "! kill -0 $DPID 2>/dev/null"
stopped=$?
left=$(our_mps_processes | tr '\n' ' ')
quit_seen=$(grep -c "MPS control daemon stopped" "$DLOG")
check stop_quits_mps "$([ $stopped = 0 ] && [ -z "$left" ] && [ "$quit_seen" -ge 1 ] && echo true || echo false)" \
    seconds=$((SECONDS - t0)) mps_processes_left="${left:-none}" quit_seen="$quit_seen"
DPID=
