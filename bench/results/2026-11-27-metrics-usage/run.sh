#!/bin/bash
# On the GPU machine, as a normal first run would: gpushared with NVML read (GPU settings
# untouched: set_compute_mode = false, no MPS), its state directory chosen by itself, metrics on;
# a PyTorch process of another user under the hook; then the per-GPU metrics and
# `gpushare usage` over the socket as that user and as root. Output: $OUT (or ./out).
set -u
out=${OUT:-$PWD/out}; mkdir -p "$out"
t=$PWD/target/release
w=$(mktemp -d); chmod 755 "$w"
cat > "$w/gpushare.toml" <<TOML
[gpu]
nvml = true
set_compute_mode = false
mps = false
[metrics]
listen = "127.0.0.1:9464"
TOML
id gsmetrics >/dev/null 2>&1 || useradd -m gsmetrics
"$t/gpushared" --config "$w/gpushare.toml" --bus none --socket-dir "$w/run" --log info 2>"$out/gpushared.log" &
d=$!
for _ in $(seq 50); do [ -S "$w/run/gpushare.sock" ] && break; sleep 0.2; done
chmod 755 "$w" "$w/run"
py=$(command -v python3)
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
su gsmetrics -s /bin/bash -c "cd /tmp && PYTHONPATH=$site LD_PRELOAD=$t/libgpushare.so GPUSHARE_SOCKET=$w/run/gpushare.sock $py -c '
import torch, time
x = torch.randn(4096, 4096, device=\"cuda\"); y = torch.empty(1 << 28, device=\"cuda\")
t = time.time()
while time.time() - t < 12: x = x @ x; x = x / x.norm()
torch.cuda.synchronize(); print(\"done\", torch.cuda.mem_get_info())
'" > "$out/job.txt" 2>&1 &
j=$!
sleep 8
python3 -c "import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:9464/metrics\").read().decode())" > "$out/metrics.txt" 2>&1
GPUSHARE_SOCKET=$w/run/gpushare.sock "$t/gpushare" status > "$out/status.txt" 2>&1
wait $j
sleep 3
su gsmetrics -s /bin/bash -c "GPUSHARE_SOCKET=$w/run/gpushare.sock $t/gpushare usage --by user" > "$out/usage_user.txt" 2>&1
GPUSHARE_SOCKET=$w/run/gpushare.sock "$t/gpushare" usage --by user > "$out/usage_root.txt" 2>&1
kill $d; wait $d
grep -E "state|ERROR|WARN" "$out/gpushared.log" > "$out/log_state_errors.txt"
rm -rf "$w"
