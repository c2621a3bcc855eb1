"""A latency-sensitive PyTorch inference client: requests of batch 1, 2, 4 and 8 (in turn) through a
small bf16 MLP, one at a time with a fixed pause between them, until a deadline.

Prints one JSON line: the client's name, phase, request count and latency percentiles (ms), where a
request's latency runs from its issue to the end of its synchronize, and the slowest requests
(`slowest`: up to 50 of [issue time.time(), ms], to find them in a daemon's trace).
"""
import argparse, json, time
import torch

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("--phase", default="")
p.add_argument("--until", type=float, required=True, help="absolute time.time() to stop at")
p.add_argument("--start", type=float, default=0.0, help="absolute time.time() to start measuring at")
p.add_argument("--width", type=int, default=2048)
p.add_argument("--layers", type=int, default=8)
p.add_argument("--pause-ms", type=float, default=5.0)
a = p.parse_args()

torch.manual_seed(0)
layers = []
for _ in range(a.layers):
    layers += [torch.nn.Linear(a.width, a.width), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).to("cuda", torch.bfloat16).eval()
inputs = [torch.randn(b, a.width, device="cuda", dtype=torch.bfloat16) for b in (1, 2, 4, 8)]
lat = []
slow = []
check = 0.0
with torch.inference_mode():
    for x in inputs * 20:  # warm-up
        model(x)
    torch.cuda.synchronize()
    i = 0
    while time.time() < a.until:
        x = inputs[i % len(inputs)]
        t0 = time.perf_counter()
        issued = time.time()
        y = model(x)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if time.time() >= a.start:
            lat.append(dt * 1e3)
            slow.append((round(issued, 4), round(dt * 1e3, 3)))
            if len(slow) > 200:
                slow = sorted(slow, key=lambda r: -r[1])[:50]
        if i < len(inputs):
            check += float(y.float().sum().item())
        i += 1
        time.sleep(a.pause_ms / 1e3)
lat.sort()
pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None
print(json.dumps({"name": a.name, "phase": a.phase, "requests": len(lat), "p50_ms": pct(0.5),
                  "p90_ms": pct(0.9), "p99_ms": pct(0.99), "max_ms": lat[-1] if lat else None,
                  "mean_ms": sum(lat) / len(lat) if lat else None, "check": check,
                  "slowest": sorted(slow, key=lambda r: -r[1])[:50]}), flush=True)
