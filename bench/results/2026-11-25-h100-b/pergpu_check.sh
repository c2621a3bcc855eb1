#!/bin/bash
# One GPU seen through the per-GPU accounts: a capped PyTorch process under the hook, then
# `gpushare status` (over the socket) shows its memory on the GPU named by the UUID NVML gives.
set -u
D=$(mktemp -d)
printf '[gpu]\nnvml = true\nset_compute_mode = false\nmps = false\n[clients.x]\nusers = ["*"]\nmemory = "4GiB"\n' >"$D/c.toml"
target/release/gpushared --config "$D/c.toml" --socket-dir "$D/run" --bus none --log info 2>"$1/pergpu.gpushared.log" &
dpid=$!
sleep 2
LD_PRELOAD=target/release/libgpushare.so GPUSHARE_SOCKET=$D/run/gpushare.sock GPUSHARE_CLIENT=x python3 -c '
import torch, time
a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
try:
    b = torch.empty(3 << 30, dtype=torch.uint8, device="cuda"); print("3 GiB more: ok")
except torch.cuda.OutOfMemoryError:
    print("3 GiB more: OutOfMemoryError")
print("mem_get_info", torch.cuda.mem_get_info())
x = torch.randn(4096, 4096, device="cuda")
for _ in range(300): y = x @ x
torch.cuda.synchronize(); time.sleep(4)' >"$1/pergpu.job.txt" 2>&1 &
jpid=$!
sleep 7
GPUSHARE_SOCKET=$D/run/gpushare.sock target/release/gpushare status --bus none >"$1/pergpu.status.txt" 2>&1
nvidia-smi -L >>"$1/pergpu.status.txt"
wait $jpid
kill $dpid; wait $dpid 2>/dev/null
rm -rf "$D"
