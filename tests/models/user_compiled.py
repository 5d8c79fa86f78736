"""A user's own compiled model (issue #66, item 6): built and passed through
``torch.compile`` in the user's file, with none of Inductor's profiling flags set, as a
user writes it; reporter names its generated kernels all the same."""

from __future__ import annotations

import torch
from torch import nn

from reporter.collect.target import Target


class _Block(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def build(device: str = "cpu", preset: str = "default") -> Target:
    torch.manual_seed(0)
    model = torch.compile(nn.Sequential(_Block(), _Block()).to(device))
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(32, 16, 64, generator=gen),) for _ in range(2)]
    return Target(model=model, batches=batches, batch_size=32, modes=("inference",))
