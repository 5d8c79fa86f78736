"""transformer-bloat (seed 001): a mixing layer that materialises huge tensors.

The baseline computes attention-like mixing by building (B, T, T, D) tensors
with repeat/expand/permute, multiplying them element-wise and summing, as the
seed's model did (aten::mul over 60% of GPU time, aten::copy_ from repeat and
permute). The fixed twin computes the same function with matmul.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..target import Target
from . import sizes, synthetic_batches

SIZES = {
    "tiny": dict(batch=2, seq=16, dim=16, layers=1, batches=2),
    "default": dict(batch=4, seq=64, dim=64, layers=2, batches=4),
    "large": dict(batch=8, seq=512, dim=128, layers=4, batches=4),
}


def bloated_mixing(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v, written the slow way: every product materialised."""
    b, t, d = q.shape
    qe = q.unsqueeze(2).expand(b, t, t, d)          # (B, T, T, D) view
    ke = k.unsqueeze(1).repeat(1, t, 1, 1)          # (B, T, T, D) copy
    scores = (qe * ke).sum(-1) / math.sqrt(d)       # huge aten::mul, then aten::sum
    weights = scores.softmax(-1)                    # (B, T, T)
    ve = v.unsqueeze(1).repeat(1, t, 1, 1)          # (B, T, T, D) copy
    ve = ve.permute(0, 3, 1, 2).contiguous()        # (B, D, T, T) layout copy
    mixed = (weights.unsqueeze(1) * ve).sum(-1)     # (B, D, T) huge aten::mul again
    return mixed.permute(0, 2, 1)                   # (B, T, D)


def matmul_mixing(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The same function as bloated_mixing, with two matrix products."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, dim: int, mixing):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))
        self.mixing = mixing

    def forward(self, x):
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        x = x + self.out(self.mixing(q, k, v))
        return x + self.mlp(self.norm2(x))


class MixerModel(nn.Module):
    def __init__(self, dim: int, layers: int, mixing, classes: int = 10):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(dim, mixing) for _ in range(layers)])
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        return self.head(self.blocks(x).mean(dim=1))


def _build(device: str, preset: str, mixing) -> Target:
    s = sizes(SIZES, preset)
    torch.manual_seed(0)
    model = MixerModel(s["dim"], s["layers"], mixing).to(device)
    batches = synthetic_batches(
        lambda g: (torch.randn(s["batch"], s["seq"], s["dim"], generator=g),
                   torch.randint(0, 10, (s["batch"],), generator=g)), s["batches"])
    return Target(
        model=model, batches=batches, batch_size=s["batch"],
        loss=lambda out, batch: nn.functional.cross_entropy(out, batch[1]),
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
    )


def baseline(device: str = "cpu", preset: str = "default") -> Target:
    return _build(device, preset, bloated_mixing)


def fixed(device: str = "cpu", preset: str = "default") -> Target:
    return _build(device, preset, matmul_mixing)
