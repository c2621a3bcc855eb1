# shellcheck shell=bash disable=SC2034
# Shared by the scenario scripts under bench/: sourced after `set`, it sets `root`, `target`,
# `mps_bin` and a private working directory `work` (removed at exit, with the daemon and MPS
# this file started). Nothing here changes the GPU's settings: every gpushared it starts runs
# without NVML and with the compute mode untouched.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${TARGET:-$root/target/release}
mps_bin=${MPS_BIN:-/usr/local/nvidia/bin}
work=$(mktemp -d)
chmod 755 "$work"
daemon=""
mps_up=""
bench_cleanup() {
  [[ -n $daemon ]] && kill "$daemon" 2>/dev/null
  [[ -n $mps_up ]] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe "$mps_bin/nvidia-cuda-mps-control"
  sleep 1
  rm -rf "$work"
}
trap bench_cleanup EXIT

# The absolute time.time() SECONDS from now, for the jobs' common deadlines.
at() { python3 -c "import time; print(time.time() + $1)"; }

# The [gpu] table of a benchmark daemon: GPU settings untouched, MPS on or off (MPS=true|false),
# MPS's pipe and log directories private to this run.
gpu_toml() {
  cat <<TOML
[gpu]
nvml = false
set_compute_mode = false
mps = ${1:-false}
mps_control = "$mps_bin/nvidia-cuda-mps-control"
mps_pipe_dir = "$work/gs-pipe"
mps_log_dir = "$work/gs-log"
TOML
}

# gpushared_start CONFIG LOG: a daemon on a private socket ($work/run), waited for; `hook` then
# holds the environment that puts a process under the hook attached to it.
gpushared_start() {
  rm -rf "$work/run"
  "$target/gpushared" --config "$1" --socket-dir "$work/run" --bus none --log "${DAEMON_LOG:-warn}" 2>>"$2" &
  daemon=$!
  local _
  for _ in $(seq 100); do [[ -S $work/run/gpushare.sock ]] && break; sleep 0.1; done
  [[ -S $work/run/gpushare.sock ]] || { echo "gpushared did not start (log: $2)" >&2; return 1; }
  sleep 0.5
}
gpushared_stop() {
  [[ -n $daemon ]] || return 0
  kill "$daemon"; wait "$daemon" 2>/dev/null; daemon=""; sleep 1
}
hook="LD_PRELOAD=$target/libgpushare.so GPUSHARE_SOCKET=$work/run/gpushare.sock"

# Plain MPS (no gpushare) with its own pipe and log directories, for the side-by-side phases.
mps_start() {
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  "$mps_bin/nvidia-cuda-mps-control" -d
  mps_up=1
  sleep 1
}
mps_stop() {
  echo quit | "$mps_bin/nvidia-cuda-mps-control"
  mps_up=""
  sleep 2
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

# A header line for a .jsonl file: when and on what.
header() {
  echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader) $*"
}
