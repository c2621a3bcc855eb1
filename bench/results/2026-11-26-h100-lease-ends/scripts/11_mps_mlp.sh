#!/bin/bash
# Under MPS again, the 4 small-MLP jobs only: plain MPS against gpushare under MPS with a lease per
# process, the build before (.devbase/base) and the final build (.devbase/new), alternating, each
# with its own plain-MPS phase.
set -u
B=$PWD/.devbase
for t in base new base new; do mkdir -p /tmp/w/$t; TARGET=$B/$t MODES="mps gpushare_mps_concurrent" COUNTS="4" WORKLOADS="mlp" bench/throughput/run.sh /tmp/w/$t > /tmp/w/$t.log 2>&1; python3 -c "
import json;d=json.load(open('/tmp/w/$t/throughput_summary.json'));print('$t',{k:round(v.get('vs_mps',0),3) for k,v in d.items() if isinstance(v,dict) and 'vs_mps' in v}, {k:round(v.get('total_rate',0),1) for k,v in d.items() if isinstance(v,dict) and 'total_rate' in v})"; done; tar czf $OUT/r11.tgz -C /tmp/w .
