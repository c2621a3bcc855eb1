"""A saturating GPU job for the share benchmarks: bf16 matmuls until a deadline.

Prints one JSON line: the job's name and (wall time, iterations done) samples, taken after a
synchronize every `--every` iterations, so that a rate over any window can be computed.
"""
import argparse, json, time
import torch

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("--phase", default="")
p.add_argument("--until", type=float, required=True, help="absolute time.time() to stop at")
p.add_argument("--size", type=int, default=4096)
p.add_argument("--every", type=int, default=4)
p.add_argument("--dtype", default="bfloat16")
p.add_argument("--request", type=float, help="the client's request, recorded for the analysis")
a = p.parse_args()

x = torch.randn(a.size, a.size, device="cuda", dtype=getattr(torch, a.dtype))
w = torch.randn(a.size, a.size, device="cuda", dtype=getattr(torch, a.dtype))
torch.cuda.synchronize()
samples = [(time.time(), 0)]
n = 0
while time.time() < a.until:
    for _ in range(a.every):
        y = x @ w
    n += a.every
    torch.cuda.synchronize()
    samples.append((time.time(), n))
check = float(y[0, :8].float().sum().item())
print(json.dumps({"name": a.name, "phase": a.phase, "request": a.request, "samples": samples,
                  "check": check}), flush=True)
