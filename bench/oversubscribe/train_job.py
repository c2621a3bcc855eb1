"""A PyTorch training job for the oversubscription benchmark: a deterministic MLP (fp32, TF32
matmuls) trained with Adam for a fixed number of steps. Its working set (weights, gradients,
Adam state, activations) is about 16 * layers * width^2 bytes.

Prints one JSON line: the job's name and phase, start and end (time.time()), steps per second
and a checksum of the trained weights (equal across runs of the same arguments).
"""
import argparse, json, time
import torch

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("--phase", default="")
p.add_argument("--steps", type=int, default=100)
p.add_argument("--width", type=int, default=6144)
p.add_argument("--layers", type=int, default=8)
p.add_argument("--batch", type=int, default=1024)
a = p.parse_args()

torch.backends.cuda.matmul.allow_tf32 = True
torch.manual_seed(0)
layers = []
for _ in range(a.layers):
    layers += [torch.nn.Linear(a.width, a.width), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
g = torch.Generator(device="cuda").manual_seed(1)
start = time.time()
for step in range(a.steps):
    x = torch.randn(a.batch, a.width, device="cuda", generator=g)
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
end = time.time()
checksum = float(sum(p.double().sum() for p in model.parameters()))
print(json.dumps({"name": a.name, "phase": a.phase, "start": start, "end": end,
                  "steps": a.steps, "steps_per_s": a.steps / (end - start),
                  "loss": float(loss), "checksum": checksum,
                  "max_reserved": torch.cuda.max_memory_reserved()}), flush=True)
