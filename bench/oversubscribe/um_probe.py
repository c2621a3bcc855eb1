"""How fast managed memory moves on this machine: GiB/s of bulk prefetch (cuMemPrefetchAsync)
to the host and back, against a kernel that pulls the same pages in by faults.
  python3 um_probe.py [GIB]      prints one JSON line (uses GIB of managed memory, default 4)
"""
import json, sys, time
import cupy as cp

gib = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
n = int(gib * (1 << 30))
free, total = cp.cuda.runtime.memGetInfo()
assert n < free // 2, "not that much managed memory: the card has less free"
mem = cp.cuda.malloc_managed(n)
a = cp.ndarray((n // 4,), dtype=cp.float32, memptr=mem)
dev = cp.cuda.Device().id
s = cp.cuda.Stream.null
CPU = -1


def timed(f):
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    f()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - t0


a.fill(1.0)  # first touch on the GPU
out = {"gib": gib, "card_free_gib": free / 2**30}
out["prefetch_to_host_s"] = timed(lambda: cp.cuda.runtime.memPrefetchAsync(a.data.ptr, n, CPU, s.ptr))
out["prefetch_to_gpu_s"] = timed(lambda: cp.cuda.runtime.memPrefetchAsync(a.data.ptr, n, dev, s.ptr))
out["touch_resident_s"] = timed(lambda: a.__iadd__(1.0))
cp.cuda.runtime.memPrefetchAsync(a.data.ptr, n, CPU, s.ptr)
out["fault_in_by_kernel_s"] = timed(lambda: a.__iadd__(1.0))
for k in ("prefetch_to_host", "prefetch_to_gpu", "fault_in_by_kernel"):
    out[k + "_gib_per_s"] = gib / out[k + "_s"]
out["check"] = float(a[:1024].sum())  # 3.0 * 1024
try:
    import matplotlib
    out["matplotlib"] = matplotlib.__version__
except ImportError:
    out["matplotlib"] = None
print(json.dumps(out), flush=True)
