"""What a pause costs the iterations after it: a loop of short bf16 matmuls that synchronizes after
each kernel runs RUN_MS, pauses PAUSE_MS, runs again, and so on, as a lease holder of a shared
GPU does (it waits for the token while others hold it), without gpushare:

  resume_cost.py --shape 1,2560 --seconds 8 --pause sleep     # blocked in a sleep: the CPU idles
  resume_cost.py --shape 1,2560 --seconds 8 --pause spin      # spinning: the CPU stays busy
  resume_cost.py --shape 1,2560 --seconds 8 --pause none      # no pause: the loop's rate alone

Prints one JSON line: the mean time of an iteration (launch and synchronize) by how long after the
last pause it started, in buckets of milliseconds, and over all running time. A loop whose
iterations after a sleep run slower than after a spin pays for the CPU's idle states and clock,
not for the GPU; one slower after either pays for what the pause left on the GPU or host.
"""
import argparse, json, time
import torch

BUCKETS_MS = [0.5, 1, 2, 5, 10, 20, 40, 80, 1e9]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="1,2560", help="B,N: B products of N x N per kernel")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--run-ms", type=float, default=60.0)
    p.add_argument("--pause-ms", type=float, default=20.0)
    p.add_argument("--pause", choices=["sleep", "spin", "none"], default="sleep")
    p.add_argument("--label", default="")
    a = p.parse_args()
    b, n = (int(v) for v in a.shape.split(","))
    shape = (n, n) if b == 1 else (b, n, n)
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(shape, device="cuda", dtype=torch.bfloat16) / n**0.5
    y = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        torch.matmul(x, w, out=y)
    torch.cuda.synchronize()
    sums = [0.0] * len(BUCKETS_MS)
    counts = [0] * len(BUCKETS_MS)
    clock = time.perf_counter
    end = clock() + a.seconds
    resumed = clock()
    run_until = resumed + a.run_ms / 1e3
    running_s = 0.0
    iterations = 0
    while True:
        t0 = clock()
        if t0 >= end:
            break
        if a.pause != "none" and t0 >= run_until:
            running_s += t0 - resumed
            until = t0 + a.pause_ms / 1e3
            if a.pause == "sleep":
                time.sleep(a.pause_ms / 1e3)
            else:
                while clock() < until:
                    pass
            resumed = clock()
            run_until = resumed + a.run_ms / 1e3
            continue
        torch.matmul(x, w, out=y)
        torch.cuda.synchronize()
        t1 = clock()
        since_ms = (t0 - resumed) * 1e3
        i = next(k for k, edge in enumerate(BUCKETS_MS) if since_ms < edge)
        sums[i] += t1 - t0
        counts[i] += 1
        iterations += 1
    running_s += clock() - resumed
    buckets = {}
    low = 0.0
    for edge, s, c in zip(BUCKETS_MS, sums, counts):
        name = f"{low:g}-{edge:g}ms" if edge < 1e9 else f">{low:g}ms"
        if c:
            buckets[name] = {"us": round(s / c * 1e6, 2), "n": c}
        low = edge
    print(json.dumps({"label": a.label, "pause": a.pause, "run_ms": a.run_ms, "pause_ms": a.pause_ms,
                      "shape": [b, n], "iterations": iterations,
                      "us_per_iteration": round(running_s / max(iterations, 1) * 1e6, 2),
                      "buckets": buckets}), flush=True)


if __name__ == "__main__":
    main()
