"""A process beside a capped one: allocates GIB GiB under its own (larger) cap, then trains a
small MLP while the capped process runs into its cap, and says whether anything failed."""
import json, sys, time
import torch

gib, seconds = int(sys.argv[1]), float(sys.argv[2])
block = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4096, 1024, device="cuda")
t = torch.randint(0, 10, (4096,), device="cuda")
steps, error, end = 0, "", time.time() + seconds
try:
    while time.time() < end:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
        steps += 1
    torch.cuda.synchronize()
except Exception as e:  # reported, not hidden
    error = repr(e)[:200]
print(json.dumps({"bench": "neighbour", "allocated_gib": gib, "steps": steps, "loss": float(loss),
                  "mem_get_info": list(torch.cuda.mem_get_info()), "error": error}))
