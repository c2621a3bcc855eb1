#!/usr/bin/env bash
# Each trial's patch on the build checked out, then the simulation's 240 random mixes by kind
# (promise_by_kind), one file each in OUT; "base" is the build as it is. Run from the repository
# root with a clean src/: bench/results/2026-12-05-simulation-trials/run.sh OUT PATCH...
set -euo pipefail
out=${1:?output dir}; shift
mkdir -p "$out"
for p in base "$@"; do
    git checkout -q -- src
    git clean -qfd -- src
    [ "$p" = base ] || git apply "$p"
    name=$(basename "$p" .patch)
    cargo test --release --lib simulation::tests::promise_by_kind -- --ignored --nocapture 2>&1 \
        | grep 'kept' > "$out/$name.txt"
    git checkout -q -- src
    git clean -qfd -- src
done
