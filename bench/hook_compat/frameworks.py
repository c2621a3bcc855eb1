"""Small deterministic workloads in PyTorch (also captured in a CUDA graph), CuPy and JAX. Prints
one JSON line per framework with results that must be identical with and without the hook, and
what each framework sees as the device's memory (the hook reports the client's cap)."""
import json, os, sys

which = sys.argv[1]

if which in ("torch", "torch_graph"):
    # a small MLP's training step, 200 times; for torch_graph captured once in a CUDA graph
    # (torch.cuda.graph, in the global capture mode) and replayed, as torch.compile's
    # "reduce-overhead" mode does
    import torch
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(1024, 256, device="cuda")
    t = torch.randint(0, 10, (1024,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
        return loss
    if which == "torch":
        for _ in range(200):
            loss = step()
    else:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            loss = step()
        for _ in range(200):
            graph.replay()
    free, total = torch.cuda.mem_get_info()
    print(json.dumps({"framework": which, "loss": loss.item(),
                      "param_sum": sum(float(p.detach().double().sum()) for p in model.parameters()),
                      "mem_total": total}))
elif which == "cupy":
    import cupy as cp
    a = cp.random.RandomState(0).rand(512, 512, dtype=cp.float32)
    k = cp.RawKernel(r'''
    extern "C" __global__ void scale(float* v, float s, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) v[i] *= s; }''', "scale")
    b = a @ a
    k(((b.size + 255) // 256,), (256,), (b, cp.float32(0.5), cp.int32(b.size)))
    free, total = cp.cuda.runtime.memGetInfo()
    print(json.dumps({"framework": "cupy", "mm_sum": float(b.sum()), "elem_sum": float((a * 2 + 1).sum()),
                      "mem_total": total}))
elif which == "jax":
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    # XLA times candidate GEMM kernels and keeps the fastest, which may differ from run to run
    # (and with the memory it sees); fixed kernels make the results comparable.
    os.environ.setdefault("XLA_FLAGS", "--xla_gpu_autotune_level=0 --xla_gpu_deterministic_ops=true")
    import jax, jax.numpy as jnp
    key = jax.random.PRNGKey(0)
    a = jax.random.normal(key, (512, 512), dtype=jnp.float32)
    b = (a @ a).block_until_ready()
    stats = jax.devices()[0].memory_stats() or {}
    print(json.dumps({"framework": "jax", "mm_sum": float(b.sum()), "bytes_limit": stats.get("bytes_limit")}))
