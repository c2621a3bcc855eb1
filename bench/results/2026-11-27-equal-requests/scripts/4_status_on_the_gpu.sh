#!/bin/bash
# What `gpushare status` shows of the lease mode and the demands on the GPU (NVML on, the GPU's
# settings untouched): two clients of request 0.5, first each running a loop of 50 us kernels
# synchronizing after each (they take turns), then each a launch-bound MLP training job (they run
# together); the status as JSON and as text a few seconds into each (the MLP jobs take about
# 12 s to start their steps), and after.
set -u
B=$PWD/.devbase; W=/tmp/w; rm -rf $W; mkdir -p $W/run
for f in $B/head/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
T=$B/head; cp $T/commit.txt $W/commit.txt; nvidia-smi -L > $W/gpu.txt
cat > $W/gpushare.toml <<TOML
[gpu]
set_compute_mode = false
mps = false
[clients.a]
request = 0.5
users = ["root"]
[clients.b]
request = 0.5
users = ["root"]
TOML
$T/gpushared --config $W/gpushare.toml --socket-dir $W/run --bus none --log trace 2> $W/gpushared.log &
D=$!
for _ in $(seq 100); do [ -S $W/run/gpushare.sock ] && break; sleep 0.1; done
st() { $T/gpushare status --bus none --socket $W/run/gpushare.sock "$@"; }
hook="LD_PRELOAD=$T/libgpushare.so GPUSHARE_SOCKET=$W/run/gpushare.sock"
until=$(python3 -c "import time; print(time.time() + 14)")
pids=()
for c in a b; do
  env $hook GPUSHARE_CLIENT=$c python3 bench/share/kernel_job.py $c --shape 1,2560 --sync 1 --until $until > $W/kernel.$c 2>&1 &
  pids+=($!)
done
for s in 9 13; do sleep $((s == 9 ? 9 : 4)); st --json > $W/status.kernels.$s.json; st > $W/status.kernels.$s.txt; done
wait "${pids[@]}"
sleep 3; st --json > $W/status.idle.json; st > $W/status.idle.txt
pids=()
for c in a b; do
  env $hook GPUSHARE_CLIENT=$c timeout 60 python3 bench/throughput/mnist_job.py $c --steps 20000 > $W/mlp.$c 2>&1 &
  pids+=($!)
done
for s in 20 28; do sleep $((s == 20 ? 20 : 8)); st --json > $W/status.mlp.$s.json; st > $W/status.mlp.$s.txt; done
wait "${pids[@]}"
kill $D; wait $D
xz -T4 $W/gpushared.log; tar czf $OUT/r4.tgz -C $W .
for f in $W/status.*.txt; do echo "== $(basename $f)"; cat $f; done
grep -h "grant " <(xz -dc $W/gpushared.log.xz) | grep -o "mode=Some([A-Za-z]*)" | uniq -c | head -20
tail -n 1 $W/mlp.a | cut -c1-200
