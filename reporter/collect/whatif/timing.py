"""The timing loop the what-ifs share: medians of a call's time on the device, calls
timed in turn, the operands' generator and memory cap, and what a recipe raises to skip."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from typing import Any, Callable, Sequence

from ...analyze.shapes import Call, recorded_autocast
from .. import machine


BUDGET_S = 0.3  # per variant


GPU_SAMPLE_S = 1e-3  # on a GPU each sample runs back to back calls for about this long


def _median_s(fn: Callable[[], Any], dev: Any, budget_s: float = BUDGET_S,
              host: bool = False) -> float:
    """The median seconds of one call of ``fn``. On a GPU, the device's time: calls run
    back to back between two events, so that a microsecond kernel is not timed as the
    launch and synchronisation latency around it; ``host`` times each call from the host,
    synchronised (the optimizer's step, where the launches are the point)."""
    for _ in range(3):
        fn()
    dev.synchronize()
    if dev.is_gpu and not host:
        return _device_median_s(fn, dev, budget_s)
    times: list[float] = []
    spent = 0.0
    while len(times) < 5 or (spent < budget_s and len(times) < 200):
        start = time.perf_counter()
        fn()
        dev.synchronize()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        spent += elapsed
    return statistics.median(times)


def _medians_s(fns: Sequence[Callable[[], Any]], dev: Any, budget_s: float = BUDGET_S
               ) -> list[float]:
    """The median seconds of one call of each of ``fns``, timed in turn, one call of each
    per round, the order reversed every other round: a burst of other work on the machine
    slows all of them alike instead of the one being timed then (transformer in inference
    on a shared 2-core machine, 2026-11-28: the attention timed one variant after the
    other saved 0.66-1.41 ms a step from one call to the next, and 0.0-0.4 ms in three
    runs, against 16-21% of an 8 ms step measured). ``budget_s`` per function, as for
    ``_median_s``. On a GPU, each on the device as ``_median_s`` times it: its kernels
    are what the host's load does not slow."""
    if dev.is_gpu:
        return [_median_s(fn, dev, budget_s) for fn in fns]
    for fn in fns:
        for _ in range(3):
            fn()
    dev.synchronize()
    return _in_turn(fns, dev, budget_s * len(fns), 5, 200)


def _in_turn(fns: Sequence[Callable[[], Any]], dev: Any, budget_s: float, least: int,
             most: int, within: Sequence[Callable[[], Any]] | None = None,
             lead: int = 0, faults: list[list[int]] | None = None) -> list[float]:
    """The median seconds of one call of each of ``fns``, timed from the host and
    synchronised, one call of each per round, the order reversed every other round: at
    least ``least`` rounds, and more while the calls add up to under ``budget_s`` (at
    most ``most``). ``within``, where given, holds for each call a context manager that
    is entered before it is timed and left after (a fix applied to the model's step).
    ``lead``: calls of the same function run untimed just before the timed one, inside
    the same context (their time counts against the budget). ``faults``, where given:
    one list per function, to which the page faults (minor) of each timed call go."""
    times: list[list[float]] = [[] for _ in fns]
    spent = 0.0
    rounds = 0
    while rounds < least or (spent < budget_s and rounds < most):
        order = range(len(fns)) if rounds % 2 == 0 else range(len(fns) - 1, -1, -1)
        for i in order:
            with within[i]() if within is not None else contextlib.nullcontext():
                start = time.perf_counter()
                for _ in range(lead):
                    fns[i]()
                dev.synchronize()
                before = machine.faults()[0] if faults is not None else 0
                led = time.perf_counter()
                fns[i]()
                dev.synchronize()
                end = time.perf_counter()
                if faults is not None:
                    faults[i].append(machine.faults()[0] - before)
            times[i].append(end - led)
            spent += end - start
        rounds += 1
    return [statistics.median(t) for t in times]


class Skipped(Exception):
    """A replacement not timed on purpose: its operands would take ``need_b`` bytes, over
    the cap of ``cap_b`` (see ``_cap``)."""

    def __init__(self, what: str, need_b: int, cap_b: int) -> None:
        super().__init__(f"{what} would allocate {need_b:,} bytes, over the cap of {cap_b:,}")
        self.need_b, self.cap_b = int(need_b), int(cap_b)


def _device_median_s(fn: Callable[[], Any], dev: Any, budget_s: float) -> float:
    def sample(calls: int) -> float:
        begin, end = dev.event(), dev.event()
        begin.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return max(begin.elapsed_time(end) / 1e3, 0.0) / calls
    one = sample(1)
    calls = max(1, min(100, math.ceil(GPU_SAMPLE_S / max(one, 1e-7))))
    times: list[float] = []
    spent = 0.0
    while len(times) < 5 or (spent < budget_s and len(times) < 200):
        t = sample(calls)
        times.append(t)
        spent += t * calls
    return statistics.median(times)


def _autocast(dev: Any, section: Any, calls: list[Call] | None = None) -> Any:
    """The autocast the section's model ran under, for timing its replacements alike: the
    one the target declared, else the one its trace shows (autocast entered inside the
    model's forward: analyze.shapes.recorded_autocast)."""
    import contextlib

    import torch

    declared = (getattr(section, "precision", None) or {}).get("autocast")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
        declared or (recorded_autocast(calls) if calls else None) or "")
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(dev.tensor_device.split(":")[0], dtype=dtype)


def _generator(dev: Any) -> Any:
    """A seeded generator on the device the operands are drawn on (a CPU draw of a large
    operand is serial: seconds)."""
    import torch

    return torch.Generator(device=dev.tensor_device).manual_seed(0)


_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


# A what-if may allocate this many times the model's own tensors at their peak (the
# memory profile's), and at least MIN_CAP_B: a model that holds 5 MB of tensors does not
# get 2 GiB of operands because its products read broadcast views of recorded shapes.
OWN_TENSORS_TIMES = 4
MIN_CAP_B = 256 << 20
MAX_OPERANDS_B = 2 << 30


def own_tensors_b(section: Any) -> int | None:
    """The bytes the model's own tensors held at their peak in one step: the memory
    profile's peak, else the device's allocated peak; None when neither was recorded."""
    tm = getattr(section, "tensor_memory", None)
    if tm is not None and tm.peak_b > 0:
        return int(tm.peak_b)
    held = (getattr(section, "memory", None) or {}).get("device_allocated_b")
    return int(held) if isinstance(held, int) and held > 0 else None


def _cap(dev: Any, section: Any = None) -> int:
    """Bytes a what-if may allocate for its operands: the least of MAX_OPERANDS_B, half of
    what the device where they live has free (the GPU's memory on a GPU, not the host's)
    and OWN_TENSORS_TIMES the model's own tensors (at least MIN_CAP_B)."""
    free = dev.free_memory()
    cap = min(MAX_OPERANDS_B, free // 2 if free is not None else MAX_OPERANDS_B)
    own = own_tensors_b(section) if section is not None else None
    if own is not None:
        cap = min(cap, max(MIN_CAP_B, OWN_TENSORS_TIMES * own))
    return cap
