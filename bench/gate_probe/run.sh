#!/bin/bash
# Whether work waiting on the GPU behind a stream wait (cuStreamWaitValue32) costs another
# process GPU time under time-slicing, and how soon it starts once the host opens it.
set -u
D=$(dirname "$0"); W=${1:-/tmp/gate_probe}; mkdir -p "$W"
nvcc -O2 -arch=sm_90 -o "$W/gate_probe" "$D/gate_probe.cu" -lcuda || exit 1
P="timeout 20 $W/gate_probe"
echo "open on an idle GPU:"
for i in 1 2 3; do $P gated 10 0.2 1; echo "rc=$?"; done
for cell in "50 1" "1600 4"; do
  set -- $cell
  $P runner $1 3 $2
  $P gated $1 6 100 & g=$!
  sleep 1.5
  $P runner $1 3 $2 | sed 's/^/  beside a gated process: /'
  wait $g
done
