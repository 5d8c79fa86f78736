"""transformer (seed 004): an encoder-decoder transformer in fp32.

The baseline writes attention by hand (bmm, softmax, bmm) and runs in fp32, so
on a GPU the time goes to fp32 GEMMs (sgemm kernels) as in the seed; it is
profiled in a training step and in inference. The fixed twin uses
scaled_dot_product_attention and, on a GPU, bf16 autocast (fp16 where the GPU
has no bf16) with TF32 enabled for what stays in fp32. On the CPU the fixed
twin stays in fp32: bf16 autocast there is slower on CPUs without bf16 units.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from ...model.device import is_gpu

from .. import device as devices
from ..target import Target
from . import sizes, synthetic_batches

SIZES = {
    "tiny": dict(batch=2, src=8, tgt=8, dim=32, heads=2, layers=1, vocab=64, batches=2),
    "default": dict(batch=8, src=96, tgt=96, dim=64, heads=4, layers=2, vocab=1000, batches=4),
    "large": dict(batch=64, src=256, tgt=256, dim=1024, heads=16, layers=6, vocab=32000,
                  batches=4),
}


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool):
        super().__init__()
        self.heads, self.fused = heads, fused
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, memory, causal: bool):
        b, t, d = x.shape
        h = self.heads
        q = self.q(x).view(b, t, h, d // h).transpose(1, 2)
        k, v = self.kv(memory).view(b, memory.shape[1], 2, h, d // h).permute(2, 0, 3, 1, 4)
        if self.fused:
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
            if causal:
                mask = torch.ones(t, k.shape[2], dtype=torch.bool, device=x.device).triu(1)
                scores = scores.masked_fill(mask, float("-inf"))
            y = torch.matmul(scores.softmax(-1), v)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool, cross: bool):
        super().__init__()
        self.self_attn = Attention(dim, heads, fused)
        self.cross_attn = Attention(dim, heads, fused) if cross else None
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(3))

    def forward(self, x, memory=None, causal=False):
        y = self.norms[0](x)
        x = x + self.self_attn(y, y, causal)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.norms[1](x), memory, False)
        return x + self.mlp(self.norms[2](x))


class Seq2SeqTransformer(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, fused: bool):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.encoder = nn.ModuleList(Layer(dim, heads, fused, False) for _ in range(layers))
        self.decoder = nn.ModuleList(Layer(dim, heads, fused, True) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, src, tgt):
        memory = self.emb(src)
        for layer in self.encoder:
            memory = layer(memory)
        x = self.emb(tgt)
        for layer in self.decoder:
            x = layer(x, memory, causal=True)
        return self.head(x)


def _build(device: str, preset: str, fixed: bool) -> Target:
    s = sizes(SIZES, preset)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(s["vocab"], s["dim"], s["heads"], s["layers"], fused=fixed)
    model = model.to(device)
    vocab = s["vocab"]
    batches = synthetic_batches(
        lambda g: (torch.randint(0, vocab, (s["batch"], s["src"]), generator=g),
                   torch.randint(0, vocab, (s["batch"], s["tgt"] + 1), generator=g)),
        s["batches"])
    autocast = None
    if fixed and is_gpu(device):
        autocast = "bf16" if devices.get(device).bf16_supported() else "fp16"
    return Target(
        model=model, batches=batches, batch_size=s["batch"], modes=("train", "inference"),
        forward=lambda m, batch: m(batch[0], batch[1][:, :-1]),
        loss=lambda out, batch: nn.functional.cross_entropy(
            out.float().reshape(-1, vocab), batch[1][:, 1:].reshape(-1)),
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True),
        autocast=autocast, tf32=fixed,
    )


def baseline(device: str = "cpu", preset: str = "default") -> Target:
    return _build(device, preset, fixed=False)


def fixed(device: str = "cpu", preset: str = "default") -> Target:
    return _build(device, preset, fixed=True)
