"""A transformer training loop for the share sweep (sweep.sh): an 8-layer pre-norm transformer
(d_model 1024, 16 heads, feed-forward 4096, causal, sequence 512, batch 8, vocabulary 8192;
about 117M parameters), AdamW, torch.autocast bf16, synthetic token data kept on the GPU, the
loss read with loss.item() every --every steps (the loop's only synchronize, as a training
script's logging does), until a deadline. With --compile the model runs through torch.compile
(TorchInductor: fused Triton kernels, launched by Triton's own launcher); it compiles in the
warm-up steps, before the first sample (--until in the past: compile, warm up and exit, which
fills the user's compile cache).

Prints one JSON line like matmul_job.py: the job's name, phase and (wall time, steps done)
samples, one at each loss.item().
"""
import argparse, json, os, time
import torch

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("--phase", default="")
p.add_argument("--cell", default="transformer")
p.add_argument("--mode", default="")
p.add_argument("--user", default="")
p.add_argument("--until", type=float, required=True, help="absolute time.time() to stop at")
p.add_argument("--every", type=int, default=20)
p.add_argument("--layers", type=int, default=8)
p.add_argument("--d-model", type=int, default=1024)
p.add_argument("--heads", type=int, default=16)
p.add_argument("--seq", type=int, default=512)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--vocab", type=int, default=8192)
p.add_argument("--compile", action="store_true", help="torch.compile the model")
p.add_argument("--request", type=float, help="the client's request, recorded for the analysis")
a = p.parse_args()


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(a.vocab, a.d_model)
        self.pos = torch.nn.Parameter(torch.randn(a.seq, a.d_model) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(a.d_model, a.heads, 4 * a.d_model, dropout=0.0,
                                                 activation="gelu", batch_first=True, norm_first=True)
        self.body = torch.nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(a.d_model)
        self.head = torch.nn.Linear(a.d_model, a.vocab, bias=False)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(a.seq))

    def forward(self, tok):
        h = self.emb(tok) + self.pos[: tok.shape[1]]
        h = self.body(h, mask=self.mask, is_causal=True)
        return self.head(self.norm(h))


torch.manual_seed(0)
model = LM().cuda()
fwd = torch.compile(model) if a.compile else model
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
data = torch.randint(0, a.vocab, (16, a.batch, a.seq + 1), device="cuda")


def step(i):
    tok = data[i % 16]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = fwd(tok[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tok[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


for i in range(5):
    step(i)
torch.cuda.synchronize()
samples = [(round(time.time(), 5), 0)]
n = 0
loss = None
while time.time() < a.until:
    for _ in range(a.every):
        loss = step(n)
        n += 1
    loss.item()  # the loop's synchronize, as logging does
    samples.append((round(time.time(), 5), n))
print(json.dumps({"name": a.name, "phase": a.phase, "cell": a.cell, "mode": a.mode, "user": a.user,
                  "uid": os.getuid(), "request": a.request, "unit": "steps",
                  "params": sum(t.numel() for t in model.parameters()), "until": a.until, "samples": samples,
                  "loss": None if loss is None else float(loss.item())}), flush=True)
