"""Planted models for one dominant operator that no rule explains (issue 66, item 2).
Test-only."""

from __future__ import annotations

import torch
from torch import nn

from reporter.collect.target import Target


class _GrowingOutput(nn.Module):
    """A decoder-like head that makes one piece of its output per position and builds the
    output in a Python loop with ``torch.cat([out, piece])``: each call copies everything
    made so far, so the calls' inputs grow by one piece each and the copying is quadratic
    in the length (the planted problem). With ``once``, the fix: the pieces go into a
    list, joined by one ``torch.cat``."""

    def __init__(self, once: bool, width: int = 64) -> None:
        super().__init__()
        self.once = once
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        if self.once:
            return torch.cat([h[:, i:i + 1] for i in range(h.shape[1])], dim=1)
        out = h[:, :1]
        for i in range(1, h.shape[1]):
            out = torch.cat([out, h[:, i:i + 1]], dim=1)
        return out


class _Model(nn.Module):
    def __init__(self, once: bool) -> None:
        super().__init__()
        self.head = _GrowingOutput(once)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x)


def _target(once: bool, device: str) -> Target:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(16, 256, 64, generator=gen),) for _ in range(2)]
    # frozen, as an inference model is handed over: one planted problem, not two (its
    # own forward would otherwise build autograd state: inference-autograd)
    model = _Model(once).to(device).eval().requires_grad_(False)
    return Target(model=model, batch_size=16, modes=("inference",), batches=batches)


def growing_cat(device: str = "cpu", preset: str = "default") -> Target:
    """Inference of a head that builds its 256-position output with torch.cat in a loop."""
    return _target(False, device)


def growing_cat_fixed(device: str = "cpu", preset: str = "default") -> Target:
    """The same head joining its pieces with one torch.cat."""
    return _target(True, device)
