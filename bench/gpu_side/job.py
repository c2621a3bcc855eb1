"""A PyTorch matmul job for bench/gpu_side/run.sh; prints JSON lines.

usage: job.py TAG ITERATIONS SIZE [HOLD_SECONDS]

"ready" once it holds a CUDA context (so: once MPS admitted it), "done" after ITERATIONS timed
fp16 matmuls of SIZE x SIZE, then it sleeps HOLD_SECONDS with its context still open.
"""
import ctypes
import json
import os
import sys
import time

t_launch = time.time()
tag, iterations, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hold = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0

import torch  # noqa: E402


def getenv(name):
    # The hook sets MPS variables with setenv() after Python copied os.environ.
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    v = libc.getenv(name.encode())
    return v.decode() if v else None


def emit(event, **kw):
    print(json.dumps({"event": event, "tag": tag, "pid": os.getpid(), "uid": os.getuid(), **kw}),
          flush=True)


t0 = time.time()
a = torch.randn(size, size, device="cuda", dtype=torch.float16)
b = torch.randn(size, size, device="cuda", dtype=torch.float16)
torch.cuda.synchronize()
emit("ready", t=time.time(), t_launch=t_launch, init_s=time.time() - t0)
for _ in range(5):
    a @ b
torch.cuda.synchronize()
start = time.time()
for _ in range(iterations):
    c = a @ b
torch.cuda.synchronize()
end = time.time()
emit("done", t_start=start, t_end=end, compute_s=end - start,
     tflops=2 * size ** 3 * iterations / (end - start) / 1e12,
     mps_pipe_dir=getenv("CUDA_MPS_PIPE_DIRECTORY"),
     mps_thread_percentage=getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
     ld_preload=getenv("LD_PRELOAD"))
if hold:
    time.sleep(hold)
emit("exit", t=time.time())
