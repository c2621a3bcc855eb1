"""A launch-bound MNIST-sized training job for launch_bound.sh: an MLP 784-512-256-10, batch 64,
SGD (lr 0.01, momentum 0.9), synthetic data kept on the GPU, a fixed number of steps (default
1000), the loss read with loss.item() every --item-every steps (as a training script's logging
does; 0: only at the end). Each step is a few dozen small kernels: the CPU's launches, not the
GPU, set the pace.

After start-up and --warmup steps, the job waits for the absolute time --start (so that jobs
started together begin their steps together), runs its steps and prints one JSON line: its
name, phase, start and end of the steps (time.time()), their wall time, the time into them at
every 250th step, the CPU time the process (all its threads) used during them, how late it was for --start, and its whole process
time.
"""
import time

T_PROCESS = time.time()
import argparse, json, os  # noqa: E402
import torch  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("--phase", default="")
p.add_argument("--mode", default="")
p.add_argument("--round", type=int, default=0)
p.add_argument("--steps", type=int, default=1000)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--item-every", type=int, default=10)
p.add_argument("--warmup", type=int, default=20)
p.add_argument("--start", type=float, default=0.0, help="absolute time.time() to begin the steps at")
a = p.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(784, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 256), torch.nn.ReLU(),
    torch.nn.Linear(256, 10),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
data = torch.randn(100, a.batch, 784, device="cuda")
labels = torch.randint(0, 10, (100, a.batch), device="cuda")


def step(i):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(data[i % 100]), labels[i % 100])
    loss.backward()
    opt.step()
    return loss


for i in range(a.warmup):
    step(i)
torch.cuda.synchronize()
late = time.time() - a.start
if late < 0:
    time.sleep(-late)
t0 = time.time()
c0 = sum(os.times()[:2])
loss = None
marks = []
for i in range(a.steps):
    loss = step(i)
    if a.item_every and (i + 1) % a.item_every == 0:
        loss.item()
    if (i + 1) % 250 == 0:
        marks.append(round(time.time() - t0, 3))
last = float(loss.item()) if loss is not None else None
t1 = time.time()
cpu = sum(os.times()[:2]) - c0
print(json.dumps({"name": a.name, "phase": a.phase, "mode": a.mode, "round": a.round, "uid": os.getuid(),
                  "steps": a.steps, "t_start": t0, "t_end": t1, "wall_s": t1 - t0, "cpu_s": cpu, "marks": marks, "late_s": max(0.0, late),
                  "process_s": t1 - T_PROCESS, "loss": last}), flush=True)
