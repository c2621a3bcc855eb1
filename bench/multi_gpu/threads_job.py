"""One process driving every visible GPU, one thread per GPU (as DataParallel does): bf16 matmuls
on each until a deadline. Prints one JSON line per GPU, as matmul_job.py does for one:
{"name": "NAME-gpuG", "phase": ..., "samples": [[wall time, iterations done], ...]}, a sample
after a synchronize every `--every` iterations.
"""
import argparse, json, threading, time
import torch

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("--phase", default="")
p.add_argument("--until", type=float, required=True, help="absolute time.time() to stop at")
p.add_argument("--size", type=int, default=8192)
p.add_argument("--every", type=int, default=4)
a = p.parse_args()

gpus = torch.cuda.device_count()
samples = {g: [] for g in range(gpus)}
ready = threading.Barrier(gpus)


def work(g):
    with torch.cuda.device(g):
        x = torch.randn(a.size, a.size, device=f"cuda:{g}", dtype=torch.bfloat16)
        w = torch.randn(a.size, a.size, device=f"cuda:{g}", dtype=torch.bfloat16)
        torch.cuda.synchronize(g)
        ready.wait()
        n = 0
        samples[g].append((time.time(), 0))
        while time.time() < a.until:
            for _ in range(a.every):
                y = x @ w
            n += a.every
            torch.cuda.synchronize(g)
            samples[g].append((time.time(), n))
        del y


threads = [threading.Thread(target=work, args=(g,)) for g in range(gpus)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for g in range(gpus):
    print(json.dumps({"name": f"{a.name}-gpu{g}", "phase": a.phase, "samples": samples[g]}),
          flush=True)
