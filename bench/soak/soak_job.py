"""One process of the soak (bench/soak/run.sh): a workload of the library scenario.py draws from,
run until a deadline, its progress written as JSON lines; or the solo calibration of workloads.

  soak_job.py run SPEC --name NAME --client C --start T0 --until T1 [--seed S] [--calib FILE]
      builds the workload and warms it up, waits until the absolute time.time() T0, works until T1
      and prints, one JSON object a line (flushed as it goes):
        {"kind": "start", "t": ..., "name": ..., "client": ..., "spec": ..., "pid": ..., "uid": ...}
        {"kind": "progress", "t": ..., "units": U, "busy_s": B}   at most every --every-s
        {"kind": "end", "t": ..., "units": U, "busy_s": B, ...}  (inference: latency percentiles)
      `t` is when the work counted in `units` had finished on the GPU: from CUDA events where the
      host runs ahead of the GPU, else the host's clock after a synchronize. `busy_s` is the host
      time spent in the workload's GPU phases (launching its work and waiting for it), as opposed
      to its host phases (a training loop's host work, a bursty job's pauses, the pause between
      inference requests).
  soak_job.py solo SPEC... [--seconds S] [--calib FILE]
      each SPEC alone in turn (no other process on the GPU), after a short warm-up, for S seconds:
        {"kind": "solo", "spec": ..., "rate": units/s, "busy": fraction of wall time in GPU
         phases, "gpu_s_per_unit": busy seconds per unit, ...}
      and, for each kernel time it had to calibrate, {"kind": "calibration", "kernel": "50us",
      "dtype": ..., "n": ..., "kernel_us": ...}. SPECs already solo-measured in FILE are skipped.
      A bursty job's pauses are random: its solo phase runs its bursts back to back for the time
      per unit, and its busy fraction is the mean burst over the mean burst and pause.

Workload SPECs (scenario.py draws them):
  kernels:D:sS   square matmuls of about D each (bf16 up to about 1.6 ms, then fp32 without TF32,
                 at most 11264 x 11264: under 1.5 GiB), synchronizing every S kernels, or with s0
                 every ~1 s of queued work; unit: a kernel
  graph:wW:sS    a 4-layer MLP (width W, batch 256, SGD) whose training step is captured once as a
                 CUDA graph and replayed, synchronizing every S replays; unit: a replay
  train:Hms      a 1024-4096-4096-10 MLP (batch 512, AdamW), loss.item() every step, then H ms of
                 host sleep; unit: a step
  mlp            an MNIST-sized MLP (784-512-256-10, batch 64, SGD), loss.item() every 10 steps:
                 launch-bound; unit: a step
  bursty:D       bursts of 50-200 ms of D kernels, synchronized at the end, then a pause of
                 100-1000 ms (drawn from --seed); unit: a kernel. Each whole burst writes a line
                 {"kind": "burst", "t0": .., "t1": .., "x": slowdown} (x: its wall time over its
                 kernels' calibrated time), and the end line gives their p50 and p90
  infer          a bf16 MLP (4 layers of 1024) forward on batch 1, 2, 4, 8 in turn, synchronized,
                 every 5 ms; unit: a request, whose latency is recorded
Every process allocates well under 2 GiB of device memory and never managed memory.
"""
import argparse
import gc
import json
import math
import os
import random
import sys
import time

import torch

DEV = "cuda"
BURST_S = (0.05, 0.2)  # a bursty job's bursts, seconds of work
PAUSE_S = (0.1, 1.0)  # and its pauses
# matmul shapes in order of kernel time: bf16 squares, then fp32 ones (no TF32: SIMT kernels, ~10x
# slower per flop), the largest 11264^2 (3 x 0.5 GB)
LADDER = ([("bf16", n) for n in (256, 384, 512, 768, 1024, 1280, 1536, 2048, 2560, 3072, 3584, 4096,
                                 5120, 6144, 7168, 8192)]
          + [("fp32", n) for n in (4096, 5120, 6144, 7168, 8192, 9216, 10240, 11264)])
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def emit(record):
    print(json.dumps(record), flush=True)


def seconds_of(text):
    """'50us', '1.6ms', '20ms' -> seconds."""
    t = text.strip().lower()
    for suffix, scale in (("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if t.endswith(suffix):
            return float(t[: -len(suffix)]) * scale
    return float(t)


# --- kernels of a chosen length ---------------------------------------------------------------

def operands(dtype, n):
    x = torch.randn(n, n, device=DEV, dtype=DTYPES[dtype])
    w = torch.randn(n, n, device=DEV, dtype=DTYPES[dtype]) / math.sqrt(n)
    return x, w, torch.empty(n, n, device=DEV, dtype=DTYPES[dtype])


def time_matmul(dtype, n, budget_s=0.05):
    """Seconds per matmul of that shape, back to back, by CUDA events."""
    x, w, y = operands(dtype, n)
    torch.matmul(x, w, out=y)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.matmul(x, w, out=y)
    e.record()
    e.synchronize()
    reps = max(2, min(1000, int(budget_s / max(s.elapsed_time(e) / 1e3, 1e-6))))
    s.record()
    for _ in range(reps):
        torch.matmul(x, w, out=y)
    e.record()
    e.synchronize()
    del x, w, y
    torch.cuda.empty_cache()
    return s.elapsed_time(e) / 1e3 / reps


class Calibration:
    """Matmul shapes for kernel times: from the calibration lines of a file, else measured (and
    printed as calibration lines)."""

    def __init__(self, path=None):
        self.known, self.memo = {}, {}
        for r in read_jsonl(path):
            if r.get("kind") == "calibration":
                self.known[r["kernel"]] = (r["dtype"], r["n"], r["kernel_us"] / 1e6)

    def shape(self, kernel):
        """(dtype, n, seconds per kernel) of the shape nearest `kernel` (e.g. '50us') in ratio."""
        if kernel not in self.known:
            target = seconds_of(kernel)
            best = None
            for dtype, n in LADDER:
                if (dtype, n) not in self.memo:
                    self.memo[(dtype, n)] = time_matmul(dtype, n)
                t = self.memo[(dtype, n)]
                if best is None or abs(math.log(t / target)) < abs(math.log(best[2] / target)):
                    best = (dtype, n, t)
                if t >= target:
                    break
            self.known[kernel] = best
            emit({"kind": "calibration", "kernel": kernel, "dtype": best[0], "n": best[1],
                  "kernel_us": round(best[2] * 1e6, 2), "device": torch.cuda.get_device_name()})
        return self.known[kernel]


# --- progress -------------------------------------------------------------------------------

class Meter:
    """A process's progress: (time, units done) points and the time spent in GPU phases, written
    as progress lines at most every `every_s` (none when silent)."""

    def __init__(self, every_s=0.1, silent=False):
        self.every_s, self.silent = every_s, silent
        self.ref = torch.cuda.Event(enable_timing=True)
        self.ref.record()
        torch.cuda.synchronize()
        self.t_ref = time.time()
        self.pending = []
        self.units, self.busy_s = 0, 0.0
        self.t, self.written, self.held = self.t_ref, -math.inf, None

    def queued(self, units):
        """Work up to `units` is queued: an event tells when it finishes."""
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        self.pending.append((ev, units))

    def done(self, units):
        """After a synchronize: the work up to `units` has finished."""
        for ev, u in self.pending:
            self.point(self.t_ref + self.ref.elapsed_time(ev) / 1e3, u)
        self.pending.clear()
        self.point(time.time(), units)

    def point(self, t, units, force=False):
        """Work up to `units` finished at `t`. A line at most every `every_s`, but the last point
        before a gap (a pause, a wait) is written too, so that progress stays in its place."""
        self.t, self.units = t, units
        if self.silent:
            return
        line = {"kind": "progress", "t": round(t, 4), "units": units, "busy_s": round(self.busy_s, 4)}
        if force or t - self.written >= self.every_s:
            if self.held and self.held["t"] > self.written and t - self.held["t"] >= self.every_s:
                emit(self.held)
            emit(line)
            self.written, self.held = t, None
        else:
            self.held = line


# --- workloads: gpu(meter, until) runs a GPU phase (ending with a synchronize); host(until) a
# --- host phase; summary() adds to the end line -----------------------------------------------

class Kernels:
    def __init__(self, kernel, sync, calib, rng):
        dtype, n, self.kernel_s = calib.shape(kernel)
        self.x, self.w, self.y = operands(dtype, n)
        self.mark_every = max(1, round(0.02 / self.kernel_s))  # an event about every 20 ms of work
        self.batch = sync if sync > 0 else max(1, round(1.0 / self.kernel_s))
        self.info = {"dtype": dtype, "n": n, "kernel_us": round(self.kernel_s * 1e6, 2)}

    def launch(self, meter, count, until):
        u = meter.units
        for i in range(count):
            torch.matmul(self.x, self.w, out=self.y)
            u += 1
            if u % self.mark_every == 0:
                meter.queued(u)
                if i + 1 < count and time.time() >= until:
                    break
        torch.cuda.synchronize()
        meter.done(u)

    def gpu(self, meter, until):
        self.launch(meter, self.batch, until)

    def host(self, until):
        pass

    def summary(self):
        return self.info


class Bursty(Kernels):
    """Records each whole burst's wall time over its kernels' calibrated time alone: its
    slowdown (about 1 alone)."""

    def __init__(self, kernel, calib, rng):
        super().__init__(kernel, 0, calib, rng)
        self.rng = rng
        self.slowdowns = []

    def gpu(self, meter, until):
        n = max(1, round(self.rng.uniform(*BURST_S) / self.kernel_s))
        u0, t0, wall0 = meter.units, time.perf_counter(), time.time()
        self.launch(meter, n, until)
        if meter.units - u0 == n:
            x = (time.perf_counter() - t0) / (n * self.kernel_s)
            self.slowdowns.append(x)
            if not meter.silent:
                emit({"kind": "burst", "t0": round(wall0, 4), "t1": round(time.time(), 4), "x": round(x, 4)})

    def summary(self):
        s = sorted(self.slowdowns)
        if not s:
            return self.info

        def pct(q):
            return round(s[min(len(s) - 1, int(q * len(s)))], 3)
        return {**self.info, "bursts": len(s), "burst_x_p50": pct(0.5), "burst_x_p90": pct(0.9)}

    def host(self, until):
        time.sleep(max(0.0, min(self.rng.uniform(*PAUSE_S), until - time.time())))


def mlp_model(sizes):
    layers = []
    for i, o in zip(sizes, sizes[1:]):
        layers += [torch.nn.Linear(i, o), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).to(DEV)


class Steps:
    """A training loop: `every` steps, loss.item(), then `host_s` of host sleep."""

    def __init__(self, step, every=1, host_s=0.0):
        self.step, self.every, self.host_s = step, every, host_s

    def gpu(self, meter, until):
        for k in range(self.every):
            loss = self.step(meter.units + k)
        loss.item()
        meter.done(meter.units + self.every)

    def host(self, until):
        if self.host_s:
            time.sleep(self.host_s)

    def summary(self):
        return {}


def train(host_ms):
    model = mlp_model([1024, 4096, 4096, 10])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = torch.randn(4, 512, 1024, device=DEV), torch.randint(0, 10, (4, 512), device=DEV)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x[i % 4]), y[i % 4])
        loss.backward()
        opt.step()
        return loss
    return Steps(step, 1, host_ms / 1e3)


def mlp():
    model = mlp_model([784, 512, 256, 10])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(100, 64, 784, device=DEV), torch.randint(0, 10, (100, 64), device=DEV)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x[i % 100]), y[i % 100])
        loss.backward()
        opt.step()
        return loss
    return Steps(step, 10)


def graph(width, sync):
    model = mlp_model([width] * 4 + [10])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x, y = torch.randn(256, width, device=DEV), torch.randint(0, 10, (256,), device=DEV)

    def train_step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return loss
    side = torch.cuda.Stream()  # warm-up on a side stream, as graph capture needs
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            train_step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loss = train_step()

    def step(i):
        g.replay()
        return loss
    return Steps(step, sync)


class Infer:
    PAUSE_S = 0.005

    def __init__(self):
        torch.manual_seed(0)
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(1024, 1024), torch.nn.GELU()]
        self.model = torch.nn.Sequential(*layers).to(DEV, torch.bfloat16).eval()
        self.inputs = [torch.randn(b, 1024, device=DEV, dtype=torch.bfloat16) for b in (1, 2, 4, 8)]
        self.latency_ms = []

    def gpu(self, meter, until):
        t0 = time.perf_counter()
        with torch.inference_mode():
            self.model(self.inputs[meter.units % 4])
        torch.cuda.synchronize()
        self.latency_ms.append((time.perf_counter() - t0) * 1e3)
        meter.done(meter.units + 1)

    def host(self, until):
        time.sleep(self.PAUSE_S)

    def summary(self):
        lat = sorted(self.latency_ms)
        if not lat:
            return {}

        def pct(q):
            return round(lat[min(len(lat) - 1, int(q * len(lat)))], 4)
        return {"requests": len(lat), "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99),
                "max_ms": round(lat[-1], 4), "mean_ms": round(sum(lat) / len(lat), 4)}


def make(spec, calib, rng):
    kind, *args = spec.split(":")
    if kind == "kernels":
        return Kernels(args[0], int(args[1].lstrip("s")), calib, rng)
    if kind == "bursty":
        return Bursty(args[0], calib, rng)
    if kind == "graph":
        return graph(int(args[0].lstrip("w")), int(args[1].lstrip("s")))
    if kind == "train":
        return train(seconds_of(args[0]) * 1e3)
    if kind == "mlp":
        return mlp()
    if kind == "infer":
        return Infer()
    raise SystemExit(f"soak_job.py: no workload {spec!r}")


def work(w, meter, until, pauses=True):
    """GPU phases (timed into meter.busy_s) and host phases until `until`."""
    while time.time() < until:
        t = time.perf_counter()
        w.gpu(meter, until)
        meter.busy_s += time.perf_counter() - t
        if pauses:
            w.host(until)


def warm_up(w, seconds=0.5):
    work(w, Meter(silent=True), time.time() + seconds)
    torch.cuda.synchronize()
    if isinstance(w, Infer):
        w.latency_ms.clear()


# --- modes ----------------------------------------------------------------------------------

def read_jsonl(path):
    if not path or not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def run(a):
    rng = random.Random(a.seed)
    w = make(a.spec, Calibration(a.calib), rng)
    warm_up(w)
    time.sleep(max(0.0, a.start - time.time()))
    emit({"kind": "start", "t": round(time.time(), 4), "name": a.name, "client": a.client, "spec": a.spec,
          "mode": a.mode, "pid": os.getpid(), "uid": os.getuid(), "planned_start": a.start,
          "until": a.until})
    meter = Meter(a.every_s)
    meter.point(meter.t_ref, 0, force=True)
    work(w, meter, a.until)
    torch.cuda.synchronize()
    meter.point(meter.t, meter.units, force=True)
    emit({"kind": "end", "t": round(meter.t, 4), "units": meter.units, "busy_s": round(meter.busy_s, 4),
          "name": a.name, **w.summary()})


def solo(a):
    calib = Calibration(a.calib)
    done = {r["spec"] for r in read_jsonl(a.calib) if r.get("kind") == "solo"}
    for spec in dict.fromkeys(a.specs):
        if spec in done:
            continue
        bursty = spec.startswith("bursty:")
        w = make(spec, calib, random.Random(0))
        warm_up(w)
        meter = Meter(silent=True)
        t0 = time.time()
        work(w, meter, t0 + a.seconds, pauses=not bursty)
        wall = time.time() - t0
        per_unit = meter.busy_s / max(1, meter.units)
        rec = {"kind": "solo", "spec": spec, "units": meter.units, "wall_s": round(wall, 4),
               "busy_s": round(meter.busy_s, 4), "gpu_s_per_unit": per_unit,
               "rate": meter.units / wall, "busy": meter.busy_s / wall, **w.summary()}
        if bursty:  # bursts back to back above; pauses by their mean
            burst = sum(BURST_S) / 2 / w.kernel_s * per_unit
            rec["busy"] = burst / (burst + sum(PAUSE_S) / 2)
            rec["rate"] = rec["busy"] / per_unit
        rec["device"] = torch.cuda.get_device_name()
        emit(rec)
        del w, meter
        gc.collect()
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode_", required=True)
    r = sub.add_parser("run")
    r.add_argument("spec")
    r.add_argument("--name", required=True)
    r.add_argument("--client", default="")
    r.add_argument("--mode", default="", help="recorded: gpushare or timeslice")
    r.add_argument("--start", type=float, required=True, help="absolute time.time() to start working at")
    r.add_argument("--until", type=float, required=True, help="absolute time.time() to stop at")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--calib", help="a file of calibration (and solo) lines")
    r.add_argument("--every-s", type=float, default=0.1)
    s = sub.add_parser("solo")
    s.add_argument("specs", nargs="+")
    s.add_argument("--seconds", type=float, default=2.0)
    s.add_argument("--calib", help="a file of calibration and solo lines; its solo specs are skipped")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    (run if a.mode_ == "run" else solo)(a)


if __name__ == "__main__":
    sys.exit(main())
