"""Training loops in the other frameworks the hook serves, for the share sweep (sweep.sh, LOOP=jax
or LOOP=cupy):

  jax   a 4-layer transformer encoder (width 512, 8 heads, sequence 256, batch 32) in JAX: one
        jitted step (forward, backward and AdamW) with bf16 matmuls, the loss read every 20 steps.
        XLA may launch parts of a step as CUDA graphs; its memory is allocated as needed
        (XLA_PYTHON_CLIENT_PREALLOCATE=false, as two JAX processes sharing a GPU must).
  cupy  a CuPy loop of 2048 x 2048 fp16 matmuls (cuBLAS) and an element-wise RawKernel (NVRTC)
        on each result, a synchronize every 8 iterations.

Each runs until the absolute time --until and prints one JSON line like lab_job.py: its name,
phase, kind, the framework's version and (time.time(), steps done) samples, one at each
synchronize point (at most one per --sample-s).
"""
import argparse, json, os, time

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("--kind", required=True, choices=["jax", "cupy"])
p.add_argument("--phase", default="")
p.add_argument("--cell", default="", help="the cell recorded for share/sweep_analyze.py (default: the kind)")
p.add_argument("--mode", default="")
p.add_argument("--user", default="")
p.add_argument("--until", type=float, required=True, help="absolute time.time() to stop at")
p.add_argument("--sample-s", type=float, default=0.05)
p.add_argument("--request", type=float, help="the client's request, recorded for the analysis")
a = p.parse_args()


def jax_loop():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    layers, width, heads, seq, batch, vocab = 4, 512, 8, 256, 32, 1024
    bf = jnp.bfloat16

    def dense(k, i, o):
        return jax.random.normal(k, (i, o), jnp.float32) / jnp.sqrt(i)

    keys = iter(jax.random.split(jax.random.PRNGKey(0), 4 * layers + 4))
    params = {"embed": dense(next(keys), vocab, width), "out": dense(next(keys), width, vocab),
              "blocks": [{"qkv": dense(next(keys), width, 3 * width), "proj": dense(next(keys), width, width),
                          "up": dense(next(keys), width, 4 * width), "down": dense(next(keys), 4 * width, width)}
                         for _ in range(layers)]}

    def norm(x):
        return (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)

    def mm(x, w):
        return jnp.matmul(x.astype(bf), w.astype(bf), preferred_element_type=jnp.float32)

    def loss_fn(p, tokens, targets):
        x = p["embed"][tokens]
        for b in p["blocks"]:
            q, k, v = jnp.split(mm(norm(x), b["qkv"]), 3, -1)
            split = lambda t: t.reshape(batch, seq, heads, width // heads).transpose(0, 2, 1, 3)
            att = jax.nn.softmax(mm(split(q), split(k).transpose(0, 1, 3, 2)) / jnp.sqrt(width // heads), -1)
            o = mm(att, split(v)).transpose(0, 2, 1, 3).reshape(batch, seq, width)
            x = x + mm(o, b["proj"])
            x = x + mm(jax.nn.gelu(mm(norm(x), b["up"])), b["down"])
        logits = mm(norm(x), p["out"])
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1))

    def adamw(p, g, m, v, t, lr=3e-4, b1=0.9, b2=0.95, wd=0.01):
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree_util.tree_map(
            lambda p, m, v: p - lr * (m / c1 / (jnp.sqrt(v / c2) + 1e-8) + wd * p), p, m, v)
        return p, m, v

    @jax.jit
    def step(p, m, v, t, tokens, targets):
        loss, g = jax.value_and_grad(loss_fn)(p, tokens, targets)
        p, m, v = adamw(p, g, m, v, t)
        return p, m, v, loss

    zeros = lambda: jax.tree_util.tree_map(jnp.zeros_like, params)
    state = [params, zeros(), zeros()]
    data = jax.random.randint(jax.random.PRNGKey(1), (8, batch, seq + 1), 0, vocab)

    def run(i):
        d = data[i % 8]
        p, m, v, loss = step(*state, jnp.float32(i + 1), d[:, :-1], d[:, 1:])
        state[:] = [p, m, v]
        return loss
    return run, 20, lambda loss: float(loss), "jax " + jax.__version__


def cupy_loop():
    import cupy as cp

    n = 2048
    rs = cp.random.RandomState(0)
    x = rs.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    w = (rs.standard_normal((n, n), dtype=cp.float32) / n ** 0.5).astype(cp.float16)
    y = cp.empty((n, n), dtype=cp.float16)
    scale = cp.RawKernel(r'''
    #include <cuda_fp16.h>
    extern "C" __global__ void squash(__half* v, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { float f = __half2float(v[i]); v[i] = __float2half(f / (1.0f + fabsf(f))); }
    }''', "squash")
    grid = ((n * n + 255) // 256,)

    def run(i):
        cp.matmul(x, w, out=y)
        scale(grid, (256,), (y, cp.int32(n * n)))
        return y
    return run, 8, lambda y: cp.cuda.get_current_stream().synchronize(), "cupy " + cp.__version__


step, every, sync, version = {"jax": jax_loop, "cupy": cupy_loop}[a.kind]()
out = None
for i in range(10):
    out = step(i)
sync(out)
samples = [(round(time.time(), 5), 0)]
n, last = 0, 0.0
while time.time() < a.until:
    out = step(n)
    n += 1
    if n % every == 0:
        sync(out)
        now = time.time()
        if now - last >= a.sample_s:
            samples.append((round(now, 5), n))
            last = now
if out is not None:
    sync(out)
samples.append((round(time.time(), 5), n))
print(json.dumps({"name": a.name, "phase": a.phase, "kind": a.kind, "cell": a.cell or a.kind, "mode": a.mode,
                  "user": a.user, "request": a.request, "framework": version,
                  "uid": os.getuid(), "unit": "steps", "until": a.until, "samples": samples}), flush=True)
