# shellcheck shell=bash disable=SC2034,SC2154
# Jobs run as other Unix users, for the scenarios where clients belong to different users.
# Sourced after lib.sh (it uses `work`, `target` and `root`); sets
#   py      the Python interpreter itself (not a pyenv shim or wrapper other users cannot run)
#   uhook   the environment that puts a process under the hook, for any user: a copy of
#           libgpushare.so in the work directory, the socket of the daemon lib.sh starts
#   jobdir  a directory in `work` readable by all, where bench_copy puts the job programs
# (with ALT_TARGET set, a copy of its libgpushare.so in work/lib/alt too, for phases of a second
# build), and the functions bench_users, as_user, bench_copy, json_line and use_alt.
py=${PYTHON:-$(python3 -c 'import sys; print(sys.executable)')}
jobdir=$work/jobs
mkdir -p "$jobdir" "$work/lib" "$work/home"
chmod 755 "$jobdir" "$work/lib" "$work/home"
cp "$target/libgpushare.so" "$work/lib/" 2>/dev/null && chmod 755 "$work/lib/libgpushare.so"
uhook="LD_PRELOAD=$work/lib/libgpushare.so GPUSHARE_SOCKET=$work/run/gpushare.sock GPUSHARE_NO_DAEMON=refuse"
if [[ -n ${ALT_TARGET:-} ]]; then
  mkdir -p "$work/lib/alt" && cp "$ALT_TARGET/libgpushare.so" "$work/lib/alt/" && chmod -R 755 "$work/lib/alt"
fi

# use_alt PHASE: for a phase of the second build, its hook's environment in `hook` and its
# directory (gpushared) in `target`, both the caller's locals; without ALT_TARGET's hook an error
# line for PHASE in `out`, and false.
use_alt() {
  [[ -f $work/lib/alt/libgpushare.so ]] || { json_line phase="$1" error="no ALT_TARGET hook" >>"$out"; return 1; }
  hook=${uhook//$work\/lib\//$work/lib/alt/}
  target=$ALT_TARGET
}

# json_line KEY=VALUE...: one JSON object for error and note lines in the .jsonl files.
# shellcheck source=json.sh
. "$(dirname "${BASH_SOURCE[0]}")/json.sh"
json_line() { json "$@"; }

# bench_copy FILE...: copies job programs into $jobdir, readable by every user.
bench_copy() {
  cp "$@" "$jobdir/" && chmod 644 "$jobdir"/*
}

# as_user USER CMD...: CMD as USER (its primary group and supplementary groups), with a HOME of
# its own in the work directory; as ourselves when USER is empty or is us.
as_user() {
  local u=$1
  shift
  if [[ -z $u || $u == "$(id -un)" ]]; then
    "$@"
  elif command -v setpriv >/dev/null; then
    setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups env HOME="$work/home/$u" "$@"
  else
    runuser -u "$u" -- env HOME="$work/home/$u" "$@"
  fi
}

# bench_users USER...: creates the users that are missing (useradd -M, no login shell) and makes
# sure the first can run PyTorch; where it cannot, makes the Python installation readable by others
# (as bench/gpu_side/run.sh does: these are scratch benchmark machines). Prints a JSON note line
# for what it did; returns 1 when a user is not there or the first still cannot import torch.
bench_users() {
  local u ok=0 d path
  for u in "$@"; do
    id "$u" >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin "$u" >/dev/null 2>&1 ||
      { json_line note="useradd $u failed (not root?)"; ok=1; continue; }
    mkdir -p "$work/home/$u" && chown "$u:$(id -g "$u")" "$work/home/$u"
  done
  [[ $ok == 0 ]] || return 1
  if ! as_user "$1" "$py" -c 'import torch' 2>/dev/null; then
    for path in "$(readlink -f "$py")" "$py" "$("$py" -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null)"; do
      d=$path
      while [[ $d != / && -n $d ]]; do chmod o+rx "$d" 2>/dev/null; d=$(dirname "$d"); done
    done
    json_line note="made the Python installation ($py) readable for other users"
  fi
  as_user "$1" "$py" -c 'import torch' 2>"$work/import.err" ||
    { json_line note="user $1 cannot import torch: $(tail -1 "$work/import.err")"; return 1; }
}
