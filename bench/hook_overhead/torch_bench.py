"""PyTorch under the hook: a launch-bound loop, and the memory cap as PyTorch sees it.

  python3 torch_bench.py add [ITERS] [LABEL]  tensor add in a loop (small tensors, needs < 1 GiB)
  python3 torch_bench.py mlp [ITERS] [LABEL]  small-MLP training steps (launch-bound)
  python3 torch_bench.py cap [LABEL]          allocate until torch.cuda.OutOfMemoryError

Each prints one JSON line.
"""

import json
import sys
import time

import torch


def add(iters: int, label: str) -> dict:
    x = torch.ones(1 << 20, device="cuda")
    y = torch.ones(1 << 20, device="cuda")
    for _ in range(1000):
        x.add_(y)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        x.add_(y)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return {
        "bench": "torch_add",
        "label": label,
        "iters": iters,
        "seconds": round(dt, 6),
        "iters_per_s": round(iters / dt, 1),
        "us_per_iter": round(dt * 1e6 / iters, 3),
    }


def mlp(iters: int, label: str) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    ).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(200):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        loss = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return {
        "bench": "torch_mlp",
        "label": label,
        "iters": iters,
        "seconds": round(dt, 6),
        "iters_per_s": round(iters / dt, 1),
        "us_per_iter": round(dt * 1e6 / iters, 3),
        "loss": float(loss.item()),
    }


def cap(label: str) -> dict:
    free0, total0 = torch.cuda.mem_get_info()
    chunks = []
    reached = 0
    error = ""
    for size in (256 << 20, 16 << 20, 1 << 20):
        while True:
            try:
                chunks.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
                reached += size
            except torch.cuda.OutOfMemoryError as e:
                error = str(e).splitlines()[0]
                break
    free1, total1 = torch.cuda.mem_get_info()
    out = {
        "bench": "torch_cap",
        "label": label,
        "bytes_reached": reached,
        "mem_get_info_before": [free0, total0],
        "mem_get_info_full": [free1, total1],
        "memory_reserved": torch.cuda.memory_reserved(),
        "oom": error[:200],
    }
    del chunks
    torch.cuda.empty_cache()
    out["mem_get_info_after_free"] = list(torch.cuda.mem_get_info())
    return out


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "add"
    if mode == "add":
        iters = int(sys.argv[2]) if len(sys.argv) > 2 else 200000
        label = sys.argv[3] if len(sys.argv) > 3 else ""
        result = add(iters, label)
    elif mode == "mlp":
        iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
        label = sys.argv[3] if len(sys.argv) > 3 else ""
        result = mlp(iters, label)
    elif mode == "cap":
        result = cap(sys.argv[2] if len(sys.argv) > 2 else "")
    else:
        sys.exit(f"unknown mode {mode}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
