"""Training loops of the kinds a lab runs side by side, for the mixed scenario (mixed/run.sh):

  mlp       an MNIST-sized MLP (784-512-256-10, batch 64, SGD), loss.item() every 10 steps:
            launch-bound, the GPU mostly idle
  cnn       a small convolutional network (four 3x3 conv/batch-norm/ReLU blocks, 64-256
            channels, batch 256 of 3x32x32, channels-last, AdamW, autocast bf16), loss.item()
            every 20 steps: kernels of tens to hundreds of microseconds
  dataload  a 4096-wide MLP (batch 512, AdamW) fed from the host: each step copies a pinned
            host batch to the GPU and spends --host-ms (default 4 ms) of CPU time "loading" the
            next one, loss.item() every step: the GPU idle part of every step
  tiny      a reinforcement-learning-like loop on a 64-wide policy, batch 32: a few dozen
            tiny kernels and one .item() per step: bound by launches and synchronizes alone
  graphed   the cnn's network and batch with SGD, its whole training step (forward, backward,
            optimizer) captured once in a CUDA graph and replayed (what torch.compile's
            "reduce-overhead" mode does): one graph launch per step, loss.item() every 20

Each runs its steps until the absolute time --until and prints one JSON line: its name, phase,
kind and (time.time(), steps done) samples, one at each synchronize point (at most one per
--sample-s).
"""
import argparse, json, os, time
import torch

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("--kind", required=True, choices=["mlp", "cnn", "dataload", "tiny", "graphed"])
p.add_argument("--phase", default="")
p.add_argument("--cell", default="", help="the cell recorded for share/sweep_analyze.py (default: the kind)")
p.add_argument("--mode", default="")
p.add_argument("--user", default="")
p.add_argument("--until", type=float, required=True, help="absolute time.time() to stop at")
p.add_argument("--host-ms", type=float, default=4.0)
p.add_argument("--sample-s", type=float, default=0.05)
p.add_argument("--request", type=float, help="the client's request, recorded for the analysis")
a = p.parse_args()
torch.manual_seed(0)
dev = "cuda"


def mlp():
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(100, 64, 784, device=dev), torch.randint(0, 10, (100, 64), device=dev)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x[i % 100]), y[i % 100])
        loss.backward()
        opt.step()
        return loss
    return step, 10


def cnn_model():
    def block(i, o):
        return [torch.nn.Conv2d(i, o, 3, padding=1, bias=False), torch.nn.BatchNorm2d(o), torch.nn.ReLU()]
    return torch.nn.Sequential(*block(3, 64), *block(64, 128), torch.nn.MaxPool2d(2), *block(128, 256),
                               torch.nn.MaxPool2d(2), *block(256, 256), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(256, 10)).to(dev, memory_format=torch.channels_last)


def cnn():
    model = cnn_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = [torch.randn(256, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last) for _ in range(8)]
    y = torch.randint(0, 10, (8, 256), device=dev)

    def step(i):
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x[i % 8]), y[i % 8])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step, 20


def dataload():
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096),
                                torch.nn.GELU(), torch.nn.Linear(4096, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    host = [torch.randn(512, 1024).pin_memory() for _ in range(4)]
    y = torch.randint(0, 10, (512,), device=dev)

    def step(i):
        x = host[i % 4].to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        t = time.perf_counter() + a.host_ms / 1e3  # the next batch's loading, on the CPU
        while time.perf_counter() < t:
            pass
        return loss
    return step, 1


def tiny():
    w1 = torch.randn(16, 64, device=dev, requires_grad=True)
    w2 = torch.randn(64, 4, device=dev, requires_grad=True)
    opt = torch.optim.Adam([w1, w2], lr=1e-3)
    obs = torch.randn(32, 16, device=dev)

    def step(i):
        nonlocal obs
        logits = torch.tanh(obs @ w1) @ w2
        act = torch.distributions.Categorical(logits=logits).sample()
        reward = (act == (i % 4)).float() - 0.25
        loss = -(torch.log_softmax(logits, -1).gather(1, act[:, None]).squeeze(1) * reward).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        obs = torch.roll(obs, 1, 0) * 0.99 + 0.01 * torch.randn_like(obs)
        return loss
    return step, 1


def graphed():
    model = cnn_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(256, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (256,), device=dev)

    def train():
        with torch.autocast(dev, dtype=torch.bfloat16, cache_enabled=False):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return loss
    side = torch.cuda.Stream()  # warm-up on a side stream, as graph capture needs
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            train()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = train()

    def step(i):
        graph.replay()
        return loss
    return step, 20


step, every = {"mlp": mlp, "cnn": cnn, "dataload": dataload, "tiny": tiny, "graphed": graphed}[a.kind]()
for i in range(10):
    step(i)
torch.cuda.synchronize()
samples = [(round(time.time(), 5), 0)]
n, last = 0, 0.0
loss = None
while time.time() < a.until:
    loss = step(n)
    n += 1
    if n % every == 0:
        loss.item()
        now = time.time()
        if now - last >= a.sample_s:
            samples.append((round(now, 5), n))
            last = now
torch.cuda.synchronize()
samples.append((round(time.time(), 5), n))
print(json.dumps({"name": a.name, "phase": a.phase, "kind": a.kind, "cell": a.cell or a.kind, "mode": a.mode,
                  "user": a.user, "request": a.request,
                  "uid": os.getuid(), "unit": "steps", "until": a.until, "samples": samples,
                  "loss": float(loss.item()) if loss is not None else None}), flush=True)
