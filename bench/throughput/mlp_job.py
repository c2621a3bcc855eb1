"""A small-MLP training job for the throughput benchmark, the kind of job the MPS how-tos run ten
at a time: an MNIST-sized MLP (784-512-512-10, batch 128, Adam) on synthetic data kept on the
GPU, training steps until a deadline. Launch-bound: each step is a few dozen small kernels.

Prints one JSON line like matmul_job.py: the job's name, phase and (wall time, steps done)
samples, taken after a synchronize every `--every` steps.
"""
import argparse, json, time
import torch

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("--phase", default="")
p.add_argument("--until", type=float, required=True, help="absolute time.time() to stop at")
p.add_argument("--every", type=int, default=20)
p.add_argument("--batch", type=int, default=128)
a = p.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(784, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 10),
).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = torch.nn.CrossEntropyLoss()
data = torch.randn(64, a.batch, 784, device="cuda")
labels = torch.randint(0, 10, (64, a.batch), device="cuda")


def step(i):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(data[i % 64]), labels[i % 64])
    loss.backward()
    opt.step()
    return loss


for i in range(50):
    step(i)
torch.cuda.synchronize()
samples = [(time.time(), 0)]
n = 0
while time.time() < a.until:
    for _ in range(a.every):
        loss = step(n)
        n += 1
    torch.cuda.synchronize()
    samples.append((time.time(), n))
print(json.dumps({"name": a.name, "phase": a.phase, "samples": samples, "check": float(loss.item())}),
      flush=True)
