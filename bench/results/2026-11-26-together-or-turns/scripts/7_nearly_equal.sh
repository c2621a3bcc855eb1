#!/bin/bash
# Requests 0.5 / 0.49 (two users): loops of 50 us kernels synchronizing after each and of 1.6 ms
# kernels synchronizing every 4, under this build (.devbase/head, whose trials also run where
# weights are that near) and the build before leases could take turns (.devbase/old, the _alt
# phases), each solo phase again after.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
cp $B/head/commit.txt $W/commit.txt; cp $B/old/commit.txt $W/commit_alt.txt; nvidia-smi -L > $W/gpu.txt
export TARGET=$B/head ALT_TARGET=$B/old DAEMON_LOG=trace
SOLO_AGAIN=1 NAME=nearly CELLS="" QUAD_CELLS="" MIX_CELLS="50us:1 1600us:4" MIX_REQUESTS=0.5/0.49 TRANSFORMER="" \
  BUDGET=250 timeout 270 bench/share/sweep.sh $W > $W/nearly.log 2>&1
xz -T4 $W/*.gpushared.log 2>/dev/null; tar czf $OUT/r7.tgz -C $W .
python3 -c "
import json
d=json.load(open('$W/nearly_summary.json'))
for k,v in d.items():
  if isinstance(v,dict) and 'jobs' in v: print(k, {j:(round(x['share'],3), round(x.get('max_error_points',0),1)) for j,x in v['jobs'].items()}, round(v['sum'],3))"
