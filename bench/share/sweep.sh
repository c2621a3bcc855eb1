#!/bin/bash
# Share accuracy where a token scheduler without MPS may fail: a kernel-size x sync-interval sweep,
# two Unix users, and a transformer training loop:
#   bench/share/sweep.sh [OUTPUT_DIR]        (run as root)
# Saturating bf16 matmul jobs (kernel_job.py) whose kernels last about 50 us, 200 us, 1.6 ms or
# 20 ms (the matmul shape is calibrated at start-up with CUDA events; the measured kernel time is
# in the output), synchronizing after every kernel (sync 1), every 4 kernels (sync 4) or only
# every ~1 s of queued work (sync 0). Each cell KERNEL:SYNC runs
#   CELL.solo   one job alone, without the hook: the cell's solo rate;
#   CELL.pair   two jobs at once under a fresh gpushared in its default mode (no MPS; one lease
#               at a time unless the GPU has room; only the clients configured), client a
#               (request 0.75, user gsbench1) and b (0.25, gsbench2); a cell A+B pairs two
#               different saturating jobs, a running A and b running B, each against its own
#               solo rate (e.g. 50us:1+20ms:0);
#   CELL.quad   (QUAD_CELLS) four jobs, clients q1-q4 with requests 0.4/0.3/0.2/0.1 (QUAD_REQUESTS
#               A/B/C/D sets them), the users alternating;
#   CELL.alone  (ALONE_CELLS) one job under gpushared, client a alone: what the hook costs a
#               lone client (its due share is 1);
#   CELL.timeslice (TIMESLICE_CELLS) the pair's two jobs without the hook: the driver's
#               time-slicing, for comparison (no due shares);
#   HEAVY+LIGHT.mix (MIX_CELLS) a saturating job (client a, 0.5, gsbench1) beside one that leaves
#               the GPU idle (client b, 0.5, gsbench2), each against its own solo rate (MIX_REQUESTS
#               A/B sets the two requests [0.5/0.5]); a cell without + runs the same job in both.
#               A cell KERNEL:SYNC:HOST_US sleeps HOST_US after each synchronize (host work).
#   A cell's job may use more than one stream: KERNEL:SYNC,streams=K spreads its kernels over K
#   streams in turn; KERNEL:SYNC,side=U adds a thread that runs a tiny kernel on a stream of its
#   own and synchronizes it every U microseconds (kernel_job.py --streams, --side-us), e.g. the
#   pair 1600us:0+1600us:0,side=1000 (client b's queue beside a side stream). KERNEL:SYNC,big=K/N
#   makes every Nth kernel one of time K (kernel_job.py --big): kernels of two sizes in one queue,
#   e.g. 50us:1,big=20ms/200.
# Then (TRANSFORMER) an 8-layer transformer training loop (transformer_job.py), or the loop LOOP
# names: alone (LOOP.solo), two under gpushare as a/b above (LOOP.gpushare), and two without
# the hook, the driver's time-slicing (LOOP.timeslice).
# A job's share is its rate over the solo rate, per WINDOW-second window; sweep_analyze.py gives
# each job's shares, the worst distance from its due share and the sum of the shares.
# Users gsbench1 and gsbench2 are created when missing (useradd -M); the work directory, the job
# programs and the hook are made readable for them, and the Python installation too where they
# cannot import torch (these are scratch benchmark machines). Without them, every job runs as the
# calling user (noted in the output).
# Environment (defaults in brackets):
#   CELLS       two-client cells [50us:1 50us:4 50us:0 200us:1 200us:4 200us:0 1600us:1 1600us:4
#               1600us:0 20ms:1 20ms:4 20ms:0]; about 45 s each
#   QUAD_CELLS  four-client cells [1600us:4 50us:1]; about 50 s each
#   ALONE_CELLS one-client cells [none]; about 45 s each
#   MIX_CELLS   HEAVY+LIGHT pairs [none], e.g. 1600us:0+50us:1:500; about 70 s each
#   TIMESLICE_CELLS cells whose pair also runs time-sliced [none]; about 30 s each
#   TRANSFORMER transformer phases besides the solo one, of "gpushare timeslice" [both]; about
#               100 s together; gpushare_alt: as gpushare, with the gpushared and libgpushare.so
#               of $ALT_TARGET (two builds side by side); gpushare_alone: client a's loop alone
#               under gpushared (due share 1: what the hook costs a lone training loop);
#               gpushare_alone_alt: the same with $ALT_TARGET's build; hooked: the loop alone
#               with libgpushare.so loaded but no daemon (it passes everything through: what
#               interposition alone costs), as long as a solo phase; solo: the solo phase again
#               (shares are taken against the mean of the solo phases: a host whose speed drifts).
#               A phase named twice runs twice, the second time as PHASE.2
#   LOOP        the training loop of those phases [transformer], or a kind of
#               mixed/lab_job.py: cnn (a small CNN, AdamW, autocast), mlp (launch-bound),
#               dataload (host work in every step), tiny (tiny kernels, a synchronize each step),
#               graphed (the cnn step replayed as one CUDA graph);
#               or a loop of framework_job.py: jax (a transformer encoder in JAX), cupy (CuPy
#               matmuls and a RawKernel); or compiled: the transformer loop through
#               torch.compile (TorchInductor's Triton kernels), each user's compile cache
#               filled before the first phase
#   LOOP_REQUESTS A/B, the requests of the loop phases' clients a and b [0.75/0.25]
#   ALT_TARGET  when set, each shared cell runs again as CELL.KIND_alt with its gpushared and
#               libgpushare.so
#   SOLO_AGAIN  when set, each cell's solo phase runs again after its shared phases, and shares
#               are taken against the mean of the cell's solo phases (a host whose speed
#               drifts: jobs that synchronize often are bound by the host, whose speed moved
#               their solo rate by up to a fifth within minutes on one H100 machine)
#   NAME [sweep]: output files NAME.jsonl, NAME_summary.json, NAME.gpushared.log and
#   NAME.stats.txt (each hooked job's counters, GPUSHARE_STATS=1)
#   SPAN [15] measured seconds of a shared phase, SOLO_SPAN [8] of a solo one, STARTUP [8] (and
#   TF_STARTUP [14]) seconds allowed for the jobs to start, WINDOW [10], QUANTUM [the daemon's
#   default] the lease length, QUEUE_AHEAD [the daemon's default] its daemon.queue_ahead,
#   BUDGET [450] seconds after which phases not yet started are
#   skipped (an error line each), PYTHON (with torch) [python3's interpreter].
# The full default set takes about 13 minutes on an H100; bench/run.sh splits it into parts 7-9.
# Needs python3 with torch; gpushared and libgpushare.so prebuilt in $TARGET (default
# target/release). The GPU's settings are untouched.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"
# shellcheck source=../users.sh
. "$here/../users.sh"
export PYTHONUNBUFFERED=1
outdir=${1:-${OUT:-$here}}
name=${NAME:-sweep}
out=$outdir/$name.jsonl
cells=${CELLS-50us:1 50us:4 50us:0 200us:1 200us:4 200us:0 1600us:1 1600us:4 1600us:0 20ms:1 20ms:4 20ms:0}
quad_cells=${QUAD_CELLS-1600us:4 50us:1}
alone_cells=${ALONE_CELLS-}
mix_cells=${MIX_CELLS-}
timeslice_cells=${TIMESLICE_CELLS-}
transformer=${TRANSFORMER-gpushare timeslice}
loop=${LOOP:-transformer}
span=${SPAN:-15}
solo_span=${SOLO_SPAN:-8}
startup=${STARTUP:-8}
tf_startup=${TF_STARTUP:-14}
window=${WINDOW:-10}
quantum=${QUANTUM:-}
queue_ahead=${QUEUE_AHEAD:-}
mix_requests=${MIX_REQUESTS:-0.5/0.5}
quad_requests=${QUAD_REQUESTS:-0.4/0.3/0.2/0.1}
loop_requests=${LOOP_REQUESTS:-0.75/0.25}
budget=${BUDGET:-450}
job_limit=$((tf_startup + span + 90))
mkdir -p "$outdir"
: >"$out"

log() { echo "$*" >&2; }
# fits SECONDS PHASE: whether a phase of about SECONDS still fits in the budget; else an error line.
fits() {
  ((SECONDS + $1 <= budget)) && return 0
  json_line phase="$2" error="skipped: ${SECONDS}s gone, about $1 s more would pass BUDGET=$budget" >>"$out"
  log "   skipped (budget)"
  return 1
}
# launch FILE USER ENV PROGRAM ARGS...: PROGRAM (in $jobdir) as USER in the background, with the
# variables in ENV (a space-separated list), its output in FILE and FILE.err; its pid in `pids`.
launch() {
  local f=$1 u=$2 e=$3 prog=$4
  shift 4
  # shellcheck disable=SC2086
  as_user "$u" timeout "$job_limit" env $e "$py" "$jobdir/$prog" "$@" >"$f" 2>"$f.err" &
  pids+=($!)
}
# collect PHASE FILE...: the jobs' JSON lines into the output; an error line for a job without one.
collect() {
  local phase=$1 f
  shift
  for f in "$@"; do
    grep -h '^gpushare: stats' "$f.err" 2>/dev/null | sed "s|^|$phase $(basename "$f"): |" >>"$outdir/$name.stats.txt"
    grep -h '^{' "$f" >>"$out" 2>/dev/null ||
      json_line phase="$phase" job="$(basename "$f")" error="no result: $( (grep -m1 -E '^[A-Za-z.]*(Error|Exception)' "$f.err"; grep -v '^gpushare' "$f.err" | tail -3) 2>/dev/null | tr '\n' ' ')" >>"$out"
  done
}
# progress PHASE: the phase's shares so far, on stderr.
progress() {
  python3 "$here/sweep_analyze.py" --window "$window" "$out" 2>/dev/null | python3 -c '
import json, sys
d, ph = json.load(sys.stdin), sys.argv[1]
f = lambda x: "-" if x is None else "%.3f" % x
if ph.endswith(".solo"):
    s = d["solo"].get(ph[:-5])
    print("   solo: %s" % ("no result" if not s else "%.1f %s/s" % (s["rate"], s["unit"])
          + (", %.1f us per kernel (calibrated %s)" % (s["us_per_kernel"], s["kernel_us"]) if s.get("us_per_kernel") else "")))
elif ph in d and "jobs" in d[ph]:
    v = d[ph]
    for n, j in v["jobs"].items():
        print("   %s: share %s, windows %s, due %s" % (n, f(j["share"]), " ".join(f(w) for w in j["windows"]), f(j.get("due"))))
    print("   sum %s, worst %s points from due" % (f(v["sum"]), f(v.get("max_error_points"))))
else:
    print("   %s: no shares (%s)" % (ph, (d.get(ph) or {}).get("error", "see the errors in the output")))
' "$1" >&2
}
# start_daemon CLIENT:REQUEST:USER...: a fresh gpushared in its default mode with those clients;
# on failure, why in `derr`.
start_daemon() {
  local c n r u
  derr=""
  {
    [[ -n $quantum$queue_ahead ]] && echo '[daemon]'
    [[ -n $quantum ]] && printf 'quantum = "%s"\n' "$quantum"
    [[ -n $queue_ahead ]] && printf 'queue_ahead = "%s"\n' "$queue_ahead"
    gpu_toml false
    for c in "$@"; do
      IFS=: read -r n r u <<<"$c"
      printf '[clients.%s]\nrequest = %s\nusers = ["%s"]\n' "$n" "$r" "$u"
    done
  } >"$work/gpushare.toml"
  [[ -f $work/lib/libgpushare.so ]] || { derr="no $target/libgpushare.so"; return 1; }
  gpushared_start "$work/gpushare.toml" "$outdir/$name.gpushared.log" ||
    { derr="gpushared did not start: $(tail -2 "$outdir/$name.gpushared.log" | tr '\n' ' ')"; return 1; }
  chmod 755 "$work/run"
}

# kernel jobs: kjob_args CELL -> the shape, kernel time and sync options of its kernel
kjob_args() {
  local base=${1%%,*} k=${1%%:*} rest host=0 m mods="" mods_list
  rest=${base#*:}
  [[ $rest == *:* ]] && host=${rest#*:}
  if [[ $1 == *,* ]]; then
    mods_list=${1#*,}
    for m in ${mods_list//,/ }; do
      case ${m%%=*} in
        streams) mods+=" --streams ${m#*=}" ;;
        side) mods+=" --side-us ${m#*=}" ;;
        big)
          local bk=${m#*=}
          mods+=" --big ${shape[${bk%/*}]} --big-us ${kus[${bk%/*}]} --big-every ${bk#*/}"
          ;;
      esac
    done
  fi
  echo "--cell $1 --shape ${shape[$k]} --kernel-us ${kus[$k]} --sync ${rest%%:*} --host-us $host$mods"
}
solo_cell() { # CELL [again]: once per cell and run, or (again) once more
  local cell=$1 phase=$1.solo pids=() f
  [[ -n ${solo_done[$cell]:-} && ${2:-} != again ]] && return
  solo_done[$cell]=1
  log "== $phase"
  fits $((startup + solo_span + 12)) "$phase" || return
  [[ -n ${shape[${cell%%:*}]:-} ]] || { json_line phase="$phase" error="kernel ${cell%%:*} not calibrated" >>"$out"; return; }
  f=$work/${phase//[:\/]/_}
  # shellcheck disable=SC2046
  launch "$f" "$u1" "" kernel_job.py solo --phase "$phase" --mode solo --user "$u1" $(kjob_args "$cell") \
    --until "$(at $((startup / 2 + solo_span + 1)))"
  wait "${pids[@]}"
  collect "$phase" "$f"
  progress "$phase"
}
shared_cell() { # CELL pair|quad|alone|mix[_alt]
  local cell=$1 phase=$1.$2 pids=() files=() clients c n r u until hook=$uhook target=$target q1 q2 q3 q4
  log "== $phase"
  fits $((startup + span + 20)) "$phase" || return
  [[ -n ${shape[${cell%%:*}]:-} ]] || { json_line phase="$phase" error="kernel ${cell%%:*} not calibrated" >>"$out"; return; }
  if [[ $2 == *_alt ]]; then use_alt "$phase" || return; fi
  case ${2%_alt} in
    pair) clients=("a:0.75:$u1" "b:0.25:$u2") ;;
    quad)
      IFS=/ read -r q1 q2 q3 q4 <<<"$quad_requests"
      clients=("q1:$q1:$u1" "q2:$q2:$u2" "q3:$q3:$u1" "q4:$q4:$u2") ;;
    alone) clients=("a:0.75:$u1") ;;
    mix) clients=("a:${mix_requests%/*}:$u1" "b:${mix_requests#*/}:$u2") ;;
    timeslice) clients=("a::$u1" "b::$u2") hook="" ;;
  esac
  if [[ -n $hook ]]; then
    start_daemon "${clients[@]}" || { json_line phase="$phase" error="$derr" >>"$out"; gpushared_stop; return; }
  fi
  until=$(at $((startup + span)))
  for c in "${clients[@]}"; do
    IFS=: read -r n r u <<<"$c"
    files+=("$work/${phase//[:\/]/_}.$n")
    # a cell A+B (mixed, or a pair of different jobs): client a runs A, the others B
    jcell=$cell
    [[ $cell == *+* ]] && { [[ $n == a ]] && jcell=${cell%%+*} || jcell=${cell#*+}; }
    if [[ -n $hook ]]; then
      # shellcheck disable=SC2046
      launch "${files[-1]}" "$u" "$hook GPUSHARE_CLIENT=$n GPUSHARE_STATS=1" kernel_job.py "$n" --phase "$phase" --mode gpushare \
        --request "$r" --user "$u" $(kjob_args "$jcell") --until "$until"
    else
      # shellcheck disable=SC2046
      launch "${files[-1]}" "$u" "" kernel_job.py "ts.$n" --phase "$phase" --mode timeslice --user "$u" \
        $(kjob_args "$jcell") --until "$until"
    fi
  done
  wait "${pids[@]}"
  gpushared_stop
  collect "$phase" "${files[@]}"
  progress "$phase"
}
# loop_job FILE USER ENV NAME ARGS...: the training loop LOOP as one job (launch's arguments)
loop_job() {
  local f=$1 u=$2 e=$3 n=$4
  shift 4
  if [[ $loop == transformer ]]; then
    launch "$f" "$u" "$e" transformer_job.py "$n" "$@"
  elif [[ $loop == compiled ]]; then
    launch "$f" "$u" "$e" transformer_job.py "$n" --compile --cell compiled "$@"
  elif [[ $loop == jax || $loop == cupy ]]; then
    launch "$f" "$u" "$e" framework_job.py "$n" --kind "$loop" --cell "$loop" "$@"
  else
    launch "$f" "$u" "$e" lab_job.py "$n" --kind "$loop" --cell "$loop" "$@"
  fi
}
transformer_phase() { # solo|hooked|gpushare|gpushare_alt|gpushare_alone|gpushare_alone_alt|timeslice
  local phase=$loop.$1 pids=() files=() n r u c e until clients hook=$uhook target=$target
  # a shared phase run again is numbered (LOOP.gpushare.2); solo phases keep one name, and
  # their mean is the solo rate
  tf_runs[$1]=$((${tf_runs[$1]:-0} + 1))
  [[ $1 != solo && ${tf_runs[$1]} -gt 1 ]] && phase+=.${tf_runs[$1]}
  log "== $phase"
  if [[ $1 == solo || $1 == hooked ]]; then
    fits $((tf_startup + solo_span + 12)) "$phase" || return
    files=("$work/$phase")
    e=""
    # the hook loaded, no daemon to attach to: it passes everything through
    [[ $1 == hooked ]] && e="$hook GPUSHARE_SOCKET=$work/none.sock GPUSHARE_NO_DAEMON=passthrough"
    loop_job "${files[0]}" "$u1" "$e" "$1" --phase "$phase" --mode "$1" --user "$u1" \
      --until "$(at $((tf_startup + solo_span)))"
  else
    fits $((tf_startup + span + 20)) "$phase" || return
    clients=("a:${loop_requests%/*}:$u1" "b:${loop_requests#*/}:$u2")
    if [[ $1 == gpushare_alone* ]]; then clients=("a:${loop_requests%/*}:$u1"); fi
    if [[ $1 == gpushare*_alt ]]; then use_alt "$phase" || return; fi
    if [[ $1 == gpushare* ]]; then
      start_daemon "${clients[@]}" || { json_line phase="$phase" error="$derr" >>"$out"; gpushared_stop; return; }
    fi
    until=$(at $((tf_startup + span)))
    for c in "${clients[@]}"; do
      IFS=: read -r n r u <<<"$c"
      files+=("$work/$phase.$n")
      if [[ $1 == gpushare* ]]; then
        loop_job "${files[-1]}" "$u" "$hook GPUSHARE_CLIENT=$n GPUSHARE_STATS=1" "$n" --phase "$phase" \
          --mode "$1" --request "$r" --user "$u" --until "$until"
      else
        loop_job "${files[-1]}" "$u" "" "ts.$n" --phase "$phase" --mode timeslice --user "$u" \
          --until "$until"
      fi
    done
  fi
  wait "${pids[@]}"
  gpushared_stop
  collect "$phase" "${files[@]}"
  progress "$phase"
}

header "name=$name span=$span solo_span=$solo_span startup=$startup window=$window quantum=${quantum:-default}" >>"$out"
u1=gsbench1 u2=gsbench2
if ! bench_users "$u1" "$u2" >>"$out"; then
  u1=$(id -un) u2=$(id -un)
  json_line note="two users unavailable: every job runs as $u1, clients a/b both allow $u1" >>"$out"
  log "users gsbench1/gsbench2 unavailable: running every job as $u1"
fi
bench_copy "$here/kernel_job.py" "$here/transformer_job.py" "$here/framework_job.py" "$here/../mixed/lab_job.py"

declare -A shape=() kus=() solo_done=() tf_runs=()
kernels=$(for c in ${cells//+/ } $quad_cells $alone_cells ${mix_cells//+/ } ${timeslice_cells//+/ }; do
  [[ $c == *:* ]] && echo "${c%%:*}"
  [[ $c == *,big=*/* ]] && { b=${c#*,big=}; echo "${b%%/*}"; }
done | awk '!seen[$0]++' | tr '\n' ' ')
if [[ -n ${kernels// /} ]]; then
  log "== calibration: $kernels"
  # shellcheck disable=SC2086
  as_user "$u1" timeout 180 "$py" "$jobdir/kernel_job.py" --calibrate $kernels >"$work/cal" 2>"$work/cal.err"
  grep -h '^{' "$work/cal" >>"$out" ||
    json_line phase=calibration error="no result: $(tail -3 "$work/cal.err" | tr '\n' ' ')" >>"$out"
  while read -r k s us; do
    shape[$k]=$s kus[$k]=$us
    log "   $k: shape $s, $us us per kernel"
  done < <(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        if r.get("kind") == "calibration":
            print(r["kernel"], "%d,%d" % tuple(r["shape"]), r["kernel_us"])
' "$work/cal")
fi

valid() { # CELL: KERNEL:SYNC[:HOST_US][,streams=K][,side=U][,big=K/N], e.g. 50us:1, 1.6ms:0,side=1000
  [[ $1 =~ ^[0-9.]+(us|ms):[0-9]+(:[0-9]+)?(,streams=[0-9]+)?(,side=[0-9]+)?(,big=[0-9.]+(us|ms)/[0-9]+)?$ ]] && return 0
  json_line phase="$1" error="not a cell (KERNEL:SYNC[:HOST_US][,streams=K][,side=U][,big=K/N], e.g. 50us:4)" >>"$out"
  return 1
}
# each KIND:LIST, in this order: the cells of LIST, a solo phase for each of their kernels (a
# mixed cell HEAVY+LIGHT has two), then the shared phase of that kind
for kind_list in pair:cells quad:quad_cells alone:alone_cells mix:mix_cells timeslice:timeslice_cells; do
  list=${kind_list#*:}
  for cell in ${!list}; do
    valid "${cell%%+*}" && valid "${cell#*+}" || continue
    solo_cell "${cell%%+*}"
    [[ $cell == *+* ]] && solo_cell "${cell#*+}"
    shared_cell "$cell" "${kind_list%%:*}"
    [[ -n ${ALT_TARGET:-} ]] && shared_cell "$cell" "${kind_list%%:*}_alt"
    if [[ -n ${SOLO_AGAIN:-} ]]; then
      solo_cell "${cell%%+*}" again
      [[ $cell == *+* ]] && solo_cell "${cell#*+}" again
    fi
  done
done
if [[ -n ${transformer// /} ]]; then
  if [[ $loop == compiled ]]; then
    # compile once per user before the phases (TorchInductor's cache in each user's /tmp)
    log "== compiled: compile caches"
    pids=()
    for u in "$u1" "$u2"; do loop_job "$work/compile.$u" "$u" "" warm --phase warm --until 0; done
    wait "${pids[@]}"
    for u in "$u1" "$u2"; do grep -q '^{' "$work/compile.$u" || tail -3 "$work/compile.$u.err" >&2; done
    pids=()
  fi
  transformer_phase solo
  for t in $transformer; do
    case $t in
      solo | hooked | gpushare | gpushare_alt | gpushare_alone | gpushare_alone_alt | timeslice) transformer_phase "$t" ;;
      *) log "no transformer phase $t" ;;
    esac
  done
fi

log "== summary (${SECONDS}s)"
python3 "$here/sweep_analyze.py" --window "$window" "$out" | tee "$outdir/${name}_summary.json"
