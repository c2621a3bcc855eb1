#!/bin/bash
# Two builds of gpushare on the same seeds, one after the other on one GPU:
#   AB_BASE=DIR AB_NEW=DIR bench/soak/ab.sh OUTPUT_DIR SEED:BUILD [SEED:BUILD...]   (as root)
# BUILD is `base` or `new`: the binaries of $AB_BASE or $AB_NEW (gpushared, gpushare,
# libgpushare.so, gpushare-referee, as run.sh takes them in $TARGET). Each pair runs
# `run.sh OUTPUT_DIR/BUILD SEED` in the order given; `base` with its time-sliced run, `new`
# without (the same mix time-sliced is the same whichever build comes after it), and once both
# builds ran a seed, the new one gets the base one's time-sliced run and both are analysed again,
# so that throughput and the referee's capacity use one time-sliced run for both.
# Both builds use one set of solo measurements, OUTPUT_DIR/solo.jsonl: it is copied into the
# build's directory before each pair and takes back what that pair measured, so a workload is
# measured alone once per call (or never, where the file is given already).
# Environment: AB_SECONDS [90] each run under gpushare (SOAK_SECONDS), AB_TIMESLICE_SECONDS
# [40], AB_BUDGET [570] seconds for the whole call (the pairs that would end past it are
# skipped by run.sh's SOAK_BUDGET).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
outdir=${1:?usage: AB_BASE=DIR AB_NEW=DIR bench/soak/ab.sh OUTPUT_DIR SEED:BUILD...}
shift
: "${AB_BASE:?the base build's binaries}" "${AB_NEW:?the new build's binaries}"
mkdir -p "$outdir"
start=$SECONDS
for pair in "$@"; do
  seed=${pair%%:*} build=${pair#*:}
  case $build in
    base) target=$AB_BASE ts=${AB_TIMESLICE_SECONDS:-40} ;;
    new) target=$AB_NEW ts=0 ;;
    *) echo "ab.sh: $pair: the build is base or new" >&2; exit 2 ;;
  esac
  mkdir -p "$outdir/$build"
  [[ -e $outdir/solo.jsonl ]] && cp "$outdir/solo.jsonl" "$outdir/$build/solo.jsonl"
  left=$((${AB_BUDGET:-570} - (SECONDS - start)))
  TARGET=$target SOAK_SECONDS=${AB_SECONDS:-90} SOAK_TIMESLICE_SECONDS=$ts SOAK_BUDGET=$left \
    "$here/run.sh" "$outdir/$build" "$seed" >>"$outdir/$build.log" 2>&1
  [[ -s $outdir/$build/solo.jsonl ]] && cp "$outdir/$build/solo.jsonl" "$outdir/solo.jsonl"
  echo "seed $seed $build done at $((SECONDS - start)) s"
done
# the base build's time-sliced runs for the new one's seeds, then both analysed again
for b in "$outdir"/base/seed-*/; do
  n=$outdir/new/$(basename "$b")
  [[ -d $b/timeslice && -d $n ]] || continue
  rm -rf "$n/timeslice"
  cp -r "$b/timeslice" "$n/"
  grep -v '"timeslice"' "$n/runs.jsonl" >"$n/runs.jsonl.new"
  grep '"timeslice"' "$b/runs.jsonl" >>"$n/runs.jsonl.new"
  mv "$n/runs.jsonl.new" "$n/runs.jsonl"
done
for build in base new; do
  [[ -d $outdir/$build ]] || continue
  target=$AB_BASE
  [[ $build == new ]] && target=$AB_NEW
  TARGET=$target python3 "$here/analyze.py" "$outdir/$build" >/dev/null
done
