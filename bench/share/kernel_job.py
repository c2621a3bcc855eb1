"""A saturating GPU job of bf16 matmul kernels of a chosen length, for the kernel-size x
sync-interval sweep (sweep.sh).

  kernel_job.py --calibrate 50us 200us 1600us 20ms
      one JSON line per target kernel time: the matmul shape whose kernel time, measured with CUDA
      events over back-to-back launches, is nearest the target (square n x n matmuls, n a multiple
      of 128; past 8192, a batched matmul of b 8192 x 8192 products in one call).
  kernel_job.py NAME --shape B,N --sync S --until T [--phase P --request R ...]
      runs those kernels until the absolute time T, synchronizing after every S kernels; S = 0
      never synchronizes but every --queue-s seconds of work (default 1 s: the job keeps about a
      second of work queued, or what the driver's launch queue holds for short kernels).
      --streams K spreads the kernels over K streams in turn (each its own output; a sample
      waits for all of them); --side-us U adds a thread that, every U microseconds, runs a tiny
      kernel on a stream of its own and synchronizes that stream (a metrics or logging side
      stream beside the main queue): the two ways a process's queue is more than one stream.
      --big B,N --big-every K makes every K-th kernel one of that other shape (a job whose kernels
      differ in size: a long reduction, an evaluation step or a checkpoint's work among short
      kernels), its time recorded with --big-us; progress still counts kernels.

Prints one JSON line like matmul_job.py: the job's name, phase and (wall time, kernels done)
samples, one about every --check-s seconds of work. The sample times come from CUDA events on the
job's stream (their GPU timestamps, anchored to time.time() once at the start), so they are the
times the kernels finished even while the CPU runs a second ahead of the GPU.
"""
import argparse, json, math, os, threading, time
import torch


def kernel_us(text):
    """'50us', '1600us', '1.6ms', '20ms' -> microseconds."""
    t = text.strip().lower()
    if t.endswith("us"):
        return float(t[:-2])
    if t.endswith("ms"):
        return float(t[:-2]) * 1e3
    if t.endswith("s"):
        return float(t[:-1]) * 1e6
    return float(t)


def tensors(b, n):
    shape = (n, n) if b == 1 else (b, n, n)
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(shape, device="cuda", dtype=torch.bfloat16) / math.sqrt(n)
    return x, w, torch.empty(shape, device="cuda", dtype=torch.bfloat16)


def time_kernel(b, n, budget_s=0.08):
    """Microseconds per kernel of b n x n products, back to back, by CUDA events."""
    x, w, y = tensors(b, n)
    for _ in range(3):
        torch.matmul(x, w, out=y)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.matmul(x, w, out=y)
    e.record()
    e.synchronize()
    one = s.elapsed_time(e) / 1e3
    reps = max(3, min(2000, int(budget_s / max(one, 1e-6))))
    s.record()
    for _ in range(reps):
        torch.matmul(x, w, out=y)
    e.record()
    e.synchronize()
    t = s.elapsed_time(e) * 1e3 / reps
    del x, w, y
    torch.cuda.empty_cache()
    return t


SIZES = [512, 768, 1024, 1280, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192]


def calibrate(target, memo):
    """(b, n, measured us) nearest the target (in ratio), timing shapes as needed (memo: shape -> us)."""
    def t(b, n):
        if (b, n) not in memo:
            memo[(b, n)] = time_kernel(b, n)
        return memo[(b, n)]

    tried = []
    prev = None
    for n in SIZES:
        tried.append((1, n))
        if t(1, n) >= target:
            if prev:
                guess = int(round(prev * (target / t(1, prev)) ** (1 / 3) / 128)) * 128
                if guess not in (prev, n) and prev < guess < n:
                    t(1, guess)
                    tried.append((1, guess))
                tried.append((1, prev))
            break
        prev = n
    else:  # even 8192^2 is shorter: one batched call of b 8192 x 8192 products
        b = max(2, round(target / t(1, 8192)))
        tried.append((b, 8192))
        b2 = max(2, round(b * target / t(b, 8192)))
        if b2 != b:
            t(b2, 8192)
            tried.append((b2, 8192))
    b, n = min(tried, key=lambda s: abs(math.log(memo[s] / target)))
    return b, n, memo[(b, n)]


def side_thread(every_us):
    """Starts the side thread; returns a function that stops it and gives its synchronized runs."""
    stream = torch.cuda.Stream()
    z = torch.zeros(256, device="cuda")
    stop = threading.Event()
    runs = [0]

    def loop():
        while not stop.is_set():
            with torch.cuda.stream(stream):
                z.add_(1.0)
            stream.synchronize()
            runs[0] += 1
            time.sleep(every_us / 1e6)

    t = threading.Thread(target=loop, daemon=True)
    t.start()

    def end():
        stop.set()
        t.join()
        return runs[0]
    return end


def main():
    p = argparse.ArgumentParser()
    p.add_argument("name", nargs="?", default="calibrate")
    p.add_argument("--calibrate", nargs="+", metavar="KERNEL", help="target kernel times: 50us 1.6ms ...")
    p.add_argument("--phase", default="")
    p.add_argument("--cell", default="")
    p.add_argument("--mode", default="")
    p.add_argument("--user", default="")
    p.add_argument("--until", type=float, help="absolute time.time() to stop launching at")
    p.add_argument("--shape", help="B,N: B products of N x N per kernel (B = 1: one matmul)")
    p.add_argument("--kernel-us", type=float, help="the calibrated kernel time, recorded")
    p.add_argument("--sync", type=int, default=1, help="synchronize every SYNC kernels; 0: every --queue-s of work")
    p.add_argument("--queue-s", type=float, default=1.0)
    p.add_argument("--host-us", type=float, default=0.0,
                   help="host work (a sleep) after each synchronize: a job that leaves the GPU idle")
    p.add_argument("--streams", type=int, default=1, help="kernels spread over this many streams in turn")
    p.add_argument("--side-us", type=float, default=0.0,
                   help="a side thread: a tiny kernel on its own stream, synchronized, every SIDE_US")
    p.add_argument("--big", help="B,N: the shape of every --big-every-th kernel")
    p.add_argument("--big-every", type=int, default=0, help="every BIG_EVERY-th kernel is of shape --big")
    p.add_argument("--big-us", type=float, help="the big kernel's calibrated time, recorded")
    p.add_argument("--check-s", type=float, default=0.02, help="a sample about every CHECK_S seconds of work")
    p.add_argument("--request", type=float, help="the client's request, recorded for the analysis")
    a = p.parse_args()

    if a.calibrate:
        memo = {}
        for k in a.calibrate:
            b, n, us = calibrate(kernel_us(k), memo)
            print(json.dumps({"kind": "calibration", "kernel": k, "target_us": kernel_us(k), "shape": [b, n],
                              "kernel_us": round(us, 2), "device": torch.cuda.get_device_name()}), flush=True)
        print(json.dumps({"kind": "calibration_times",
                          "us": {f"{b}x{n}": round(v, 2) for (b, n), v in sorted(memo.items())}}), flush=True)
        return
    if a.until is None or not a.shape:
        p.error("--until and --shape are needed (or --calibrate)")
    b, n = (int(v) for v in a.shape.split(","))
    x, w, y = tensors(b, n)
    for _ in range(3):
        torch.matmul(x, w, out=y)
    torch.cuda.synchronize()
    k_s = (a.kernel_us or time_kernel(b, n)) / 1e6
    big = None
    if a.big and a.big_every > 0:
        bb, bn = (int(v) for v in a.big.split(","))
        bx, bw, by = tensors(bb, bn)
        torch.matmul(bx, bw, out=by)
        torch.cuda.synchronize()
        big_s = (a.big_us or time_kernel(bb, bn)) / 1e6
        k_s = ((a.big_every - 1) * k_s + big_s) / a.big_every  # the mean kernel
        big = (bx, bw, by)
    every = max(1, round(a.check_s / k_s))  # kernels between samples
    batch = a.sync if a.sync > 0 else max(1, round(a.queue_s / k_s))  # kernels between synchronizes
    main_stream = torch.cuda.current_stream()
    others = [torch.cuda.Stream() for _ in range(a.streams - 1)]
    lanes = [(main_stream, y)] + [(s, torch.empty_like(y)) for s in others]  # (stream, output)
    side = side_thread(a.side_us) if a.side_us > 0 else None

    ref = torch.cuda.Event(enable_timing=True)
    ref.record()
    torch.cuda.synchronize()
    t_ref = time.time()
    samples = [(round(t_ref, 5), 0)]
    pending = []

    def drain():
        for ev, k in pending:
            samples.append((round(t_ref + ref.elapsed_time(ev) / 1e3, 5), k))
        pending.clear()

    def record(k):
        """An event on the main stream after every stream's kernels so far."""
        for s in others:
            main_stream.wait_stream(s)
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(main_stream)
        pending.append((ev, k))

    done = 0
    stop = False
    while not stop:
        for _ in range(batch):
            s, out = lanes[done % len(lanes)]
            with torch.cuda.stream(s):
                if big and (done + 1) % a.big_every == 0:
                    torch.matmul(big[0], big[1], out=big[2])
                else:
                    torch.matmul(x, w, out=out)
            done += 1
            if done % every == 0:
                record(done)
                if time.time() >= a.until:
                    stop = True
                    break
        if time.time() >= a.until:
            stop = True
        if stop and (not pending or pending[-1][1] != done):
            record(done)
        torch.cuda.synchronize()
        drain()
        if a.host_us:
            time.sleep(a.host_us / 1e6)
    side_runs = side() if side else None
    check = float(y.reshape(-1)[:8].float().sum().item())
    print(json.dumps({"name": a.name, "phase": a.phase, "cell": a.cell, "mode": a.mode, "user": a.user,
                      "uid": os.getuid(), "request": a.request, "unit": "kernels", "shape": [b, n],
                      "kernel_us": a.kernel_us, "sync": a.sync, "sync_batch": batch, "host_us": a.host_us,
                      "streams": a.streams, "side_us": a.side_us, "big": a.big, "big_every": a.big_every, "big_us": a.big_us, "side_runs": side_runs, "sample_every": every,
                      "until": a.until, "samples": samples, "check": check}), flush=True)


if __name__ == "__main__":
    main()
