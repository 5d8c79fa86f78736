"""tensor-ops (seed 003): basic tensor operations timed on the CPU and the GPU.

The step runs matmul, element-wise add and mul, a transpose (made contiguous,
so that it moves memory rather than only swapping strides, which would time
as zero as it did in the seed) and a full sum on large tensors, built on the
device as seed 003 does (copying them in every step would time the bus). The
side benchmark times each operation on its own after warm-up: on the CPU with
the wall clock, on a GPU with CUDA events around many repetitions per sample
(one launch is a few microseconds of latency, not the operation), and the
report prints the seed's table: operation, CPU ms, GPU ms, speed-up.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from .. import device as devices
from ...model.device import is_gpu
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


GPU_REPEATS = 20  # operations per timed sample on a GPU, between two CUDA events


def _inputs(batch: int, n: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=device if is_gpu(device) else "cpu").manual_seed(0)
    return (torch.rand(batch, n, n, generator=gen, device=device),
            torch.rand(batch, n, n, generator=gen, device=device))


def _sample_ms(op, a, b, device: str) -> float:
    if not is_gpu(device):
        start = time.perf_counter()
        op(a, b)
        return (time.perf_counter() - start) * 1000.0
    dev = devices.get(device)
    begin, end = dev.event(), dev.event()
    begin.record()
    for _ in range(GPU_REPEATS):
        op(a, b)
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / GPU_REPEATS


def time_operations(device: str, batch: int, n: int, repeats: int) -> list[tuple[str, float]]:
    """Median milliseconds per operation on one device, after warm-up."""
    a, b = _inputs(batch, n, device)
    results = []
    for key, op in OPERATIONS.items():
        for _ in range(2):  # warm-up: kernels loaded, caches and allocator primed
            op(a, b)
        devices.get(device).synchronize()
        samples = [_sample_ms(op, a, b, device) for _ in range(repeats)]
        results.append((key, statistics.median(samples)))
    return results


def build(device: str = "cpu", preset: str = "default") -> Target:
    s = sizes(SIZES, preset)
    batch = _inputs(s["batch"], s["n"], device)  # on the device: no copy in the step
    return Target(
        model=TensorOps().to(device), batches=[batch], batch_size=1,
        forward=lambda m, b: m(b[0], b[1]), modes=("inference",),
        benchmark=lambda dev: time_operations(dev, s["batch"], s["n"], s["repeats"]),
    )
