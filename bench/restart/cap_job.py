"""A PyTorch process that holds device memory across a restart of gpushared.

Allocates FIRST GiB, waits until --until (the daemon restarts meanwhile), then tries to allocate
each of MORE GiB in turn (keeping what it got) and reports which the cap stopped, with what
cuMemGetInfo (through torch.cuda.mem_get_info) reported before and after. One JSON line.
"""
import argparse, json, time
import torch

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("first", type=float)
p.add_argument("more", type=float, nargs="+")
p.add_argument("--until", type=float, required=True)
a = p.parse_args()

GIB = 1 << 30
held = [torch.empty(int(a.first * GIB), dtype=torch.uint8, device="cuda")]
info_before = torch.cuda.mem_get_info()
while time.time() < a.until:
    time.sleep(0.05)
results = []
for gib in a.more:
    try:
        held.append(torch.empty(int(gib * GIB), dtype=torch.uint8, device="cuda"))
        results.append([gib, "ok"])
    except torch.cuda.OutOfMemoryError as e:
        results.append([gib, "OutOfMemoryError: " + str(e).split("\n")[0][:80]])
print(json.dumps({"name": a.name, "first_gib": a.first, "more": results,
                  "mem_get_info_before": info_before,
                  "mem_get_info_after": torch.cuda.mem_get_info()}), flush=True)
