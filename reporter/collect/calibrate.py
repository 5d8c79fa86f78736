"""The machine's peaks, measured on the device itself: a large matrix product per dtype
and a copy, synchronised, a second or two in all (reporter.analyze.peaks holds the
datasheets and decides when two measurements agree)."""

from __future__ import annotations

import platform
import time
from typing import Any, Callable

from ..analyze.peaks import MEASURED, Peaks


def _best_rate(fn: Callable[[], object], work: float, sync: Callable[[], None],
               budget_s: float, max_reps: int = 50) -> float:
    """The best work per second over repeats of fn (after one warm-up call)."""
    fn()
    sync()
    best, spent, reps = 0.0, 0.0, 0
    while reps < 3 or (spent < budget_s and reps < max_reps):
        start = time.perf_counter()
        fn()
        sync()
        elapsed = time.perf_counter() - start
        spent += elapsed
        reps += 1
        if elapsed > 0:
            best = max(best, work / elapsed)
    return best


def _matmul_rate(torch: Any, device: str, dtype: Any, sync: Callable[[], None],
                 budget_s: float, start_n: int, max_n: int) -> float:
    """FLOP/s of square matrix products, grown until one takes a few milliseconds."""
    n = start_n
    while True:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        sync()
        start = time.perf_counter()
        torch.mm(a, b)
        sync()
        if time.perf_counter() - start > 0.005 or n >= max_n:
            break
        n *= 2
    return _best_rate(lambda: torch.mm(a, b), 2.0 * n ** 3, sync, budget_s)


COPIES_PER_SAMPLE = 10  # copies per timed sample of a GPU's bandwidth


def measure(device: str, tf32: bool = False) -> Peaks:
    """Time what this device achieves: a large matrix product per dtype and a copy,
    synchronised, a second or two in all; labelled as measured."""
    import torch

    from . import device as devices

    started = time.perf_counter()
    dev = devices.get(device)
    on_gpu, sync = dev.is_gpu, dev.synchronize
    device = dev.tensor_device
    flops: dict[str, float] = {}
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    if on_gpu:
        dtypes["fp16"] = torch.float16
    for key, dtype in dtypes.items():
        if on_gpu and key == "fp32":
            flops["fp32"] = _fp32_rate(torch, device, sync, tf32=False)
            if tf32:
                flops["tf32"] = _fp32_rate(torch, device, sync, tf32=True)
            continue
        try:
            flops[key] = _matmul_rate(torch, device, dtype, sync, 0.25,
                                      1024 if on_gpu else 128, 8192 if on_gpu else 2048)
        except RuntimeError:  # a dtype the device has no kernels for
            continue
    # Copy bandwidth: read once and write once, 2 x the tensor's bytes per copy.
    size = (256 << 20) if on_gpu else (64 << 20)
    src = torch.empty(size // 4, device=device)
    dst = torch.empty_like(src)
    # On a GPU, copies back to back between two synchronisations: one 256 MiB copy takes
    # about 0.15 ms on HBM3, and the synchronisation's own latency made it ~10% low.
    copies = COPIES_PER_SAMPLE if on_gpu else 1

    def copy() -> None:
        for _ in range(copies):
            dst.copy_(src)
    bandwidth = _best_rate(copy, 2.0 * size * copies, sync, 0.25)
    props = dev.properties()
    name = props.name if props is not None else cpu_name()
    return Peaks(source=MEASURED, device=name, flops={k: v for k, v in flops.items() if v > 0},
                 bandwidth=bandwidth, seconds=time.perf_counter() - started,
                 threads=None if on_gpu else torch.get_num_threads())


def _fp32_rate(torch: Any, device: str, sync: Callable[[], None], tf32: bool) -> float:
    """fp32 products with TF32 off (the CUDA cores' rate) or on (the tensor cores')."""
    from .device import tf32_matmul

    with tf32_matmul("high" if tf32 else "highest"):
        return _matmul_rate(torch, device, torch.float32, sync, 0.25, 1024, 8192)


def cpu_name() -> str:
    """The CPU's model name (for the environment and for measured peaks)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
