"""tensor-ops (seed 003): basic tensor operations timed on the CPU and the GPU.

The step runs matmul, element-wise add and mul, a transpose (made contiguous,
so that it moves memory rather than only swapping strides, which would time
as zero as it did in the seed) and a full sum on large tensors. The side
benchmark times each operation on its own, with warm-up and synchronisation,
and the report prints the seed's table: operation, CPU ms, GPU ms, speed-up.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from ..target import Target
from . import sizes

SIZES = {
    "tiny": dict(batch=2, n=32, repeats=3),
    "default": dict(batch=8, n=256, repeats=5),
    "large": dict(batch=8, n=1024, repeats=10),
}

OPERATIONS = {
    "matmul": lambda a, b: torch.matmul(a, b),
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "transpose": lambda a, b: a.transpose(1, 2).contiguous(),
    "sum": lambda a, b: a.sum(),
}


class TensorOps(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return [op(a, b) for op in OPERATIONS.values()]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def time_operations(device: str, batch: int, n: int, repeats: int) -> list[tuple[str, float]]:
    """Median milliseconds per operation on one device, after warm-up."""
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(batch, n, n, generator=gen).to(device)
    b = torch.rand(batch, n, n, generator=gen).to(device)
    results = []
    for key, op in OPERATIONS.items():
        for _ in range(2):  # warm-up: kernels loaded, caches and allocator primed
            op(a, b)
        _sync(device)
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            op(a, b)
            _sync(device)
            samples.append((time.perf_counter() - start) * 1000.0)
        results.append((key, statistics.median(samples)))
    return results


def build(device: str = "cpu", preset: str = "default") -> Target:
    s = sizes(SIZES, preset)
    gen = torch.Generator().manual_seed(0)
    batch = (torch.rand(s["batch"], s["n"], s["n"], generator=gen),
             torch.rand(s["batch"], s["n"], s["n"], generator=gen))
    return Target(
        model=TensorOps().to(device), batches=[batch], batch_size=1,
        forward=lambda m, b: m(b[0], b[1]), modes=("inference",),
        benchmark=lambda dev: time_operations(dev, s["batch"], s["n"], s["repeats"]),
    )
