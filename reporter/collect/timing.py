"""Timing the target's steps without the profiler: timed steps and windows (their
number and length), the median step, what profiling costs a step, and the host's cost
of a call and of a page fault, measured once a process."""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import threading
import time
from functools import partial
from typing import Any, Callable

import torch
from torch.profiler import profile

from ..model.contention import MIN_CLEAN, Disturbance
from ..model.stats import median_interval
from . import machine
from . import device as devices
from .run_options import RunOptions


def _unprofiled_cost(stepper: Callable[[], None], device: str, steps: int,
                     windows: list[tuple[int, int, int]] | None = None) -> dict[str, float]:
    """``steps`` steps without the profiler, as the profiled ones run just after: their
    seconds and page faults (minor, major) per step, the yardstick of the profiler's own
    cost (``_profile_section``). With ``windows`` (the throughput's timed windows: their
    steps and page faults, minor and major, ``_counted``), a step's faults are the median
    of theirs and these steps' per step: what the allocator hands back and maps afresh
    moves from one window to the next (transformer in training, 2026-11-28: 3 to 2,061
    a step in the windows of one run, 188 in four steps of another whose windows took
    about 2,200), and one window of a few steps is a sample of that."""
    before = machine.faults()
    seconds = _timed(stepper, device, steps)
    after = machine.faults()
    samples = [*(windows or []), (steps, after[0] - before[0], after[1] - before[1])]
    return {"steps": steps, "step_us": seconds * 1e6 / steps,
            "minor_faults": _step_median([(n, m) for n, m, _ in samples]),
            "major_faults": _step_median([(n, j) for n, _, j in samples])}


def _step_median(samples: list[tuple[int, int]]) -> float:
    """The median per step of (steps, count) samples, each weighted by its steps (the
    first window's chunks of 1, 2, 4 steps count as the steps they ran)."""
    rates = sorted((count / n, n) for n, count in samples if n > 0)
    half, seen = sum(n for _, n in rates) / 2, 0
    for rate, n in rates:
        seen += n
        if seen >= half:
            return rate
    return 0.0


def _counted(window: Callable[[int], float], into: list[tuple[int, int, int]]
             ) -> Callable[[int], float]:
    """``window``, noting each call's steps and page faults (minor, major) in ``into``."""
    def counted(n: int) -> float:
        before = machine.faults()
        seconds = window(n)
        after = machine.faults()
        into.append((n, after[0] - before[0], after[1] - before[1]))
        return seconds
    return counted


# The profiler's own cost per recorded call, measured once per process on the CPU
# (``measured_call_us``): a call that allocates its output, as most operators do.
_CALL_PROBE_CALLS = 2000
_CALL_PROBE_ROUNDS = 3
_call_us: list[float] = []


def measured_call_us() -> float | None:
    """What the profiler, as the runner sets it (shapes and memory recorded), adds to one
    call of a small operator on the CPU, in microseconds: ``torch.add`` of two 16-element
    tensors ``_CALL_PROBE_CALLS`` times with it and without it, interleaved, the median of
    ``_CALL_PROBE_ROUNDS`` differences of thread CPU time (which other processes on the
    machine move least). Each call is three records: the operator, its output's
    allocation and the release. Measured once per process: 0.13 s on the development
    machine once the profiler has started before, as the runner's has, 1.1 s in a process
    where it has not. None when the difference is not positive (a clock too coarse, or the
    machine too busy to tell)."""
    if _call_us:
        return _call_us[0] if _call_us[0] > 0 else None
    a, b = torch.ones(16), torch.ones(16)

    def loop() -> float:
        t0 = time.thread_time()
        for _ in range(_CALL_PROBE_CALLS):
            torch.add(a, b)
        return time.thread_time() - t0

    loop()
    diffs = []
    with _filtered_native_stderr():
        for _ in range(_CALL_PROBE_ROUNDS):
            plain = loop()
            with profile(activities=devices.get("cpu").activities(), record_shapes=True,
                         profile_memory=True):
                profiled = loop()
            diffs.append((profiled - plain) * 1e6 / _CALL_PROBE_CALLS)
    _call_us.append(statistics.median(diffs))
    return _call_us[0] if _call_us[0] > 0 else None


# What one page fault costs this process, measured once (``measured_fault_us``), on
# memory mapped afresh for the probe (64 MiB): whatever the allocator holds already.
_FAULT_PROBE_BYTES = 64 << 20
_FAULT_PROBE_ROUNDS = 3
_fault_us: list[tuple[float, float]] = []


# Under ATen's grain size (32,768 elements): a fill this long runs on the calling thread.
_SERIAL_FILL = 16_384


def _serial_fill(x: torch.Tensor, value: float) -> None:
    """``x`` filled with ``value`` by torch, a slice at a time, each too short to be split
    among threads: torch's fill on one thread, its thread count left as it is."""
    for part in x.split(_SERIAL_FILL):
        part.fill_(value)


def _fault_probe(one_thread: bool = False) -> float | None:
    """Wall microseconds per page fault of a fill of freshly mapped memory (a tensor over
    an anonymous mmap: a tensor from torch.empty may reuse the heap's free memory, in a
    process that has run other models), on torch's threads as they are set, or, with
    ``one_thread``, on this thread alone (``_serial_fill``): the median of
    ``_FAULT_PROBE_ROUNDS``. Not with torch's threads set to one: setting them to one
    and back leaves scaled_dot_product_attention on the CPU about 1.5x slower for the
    rest of the process (torch 2.13: 390 us against 571 us a call at transformer's
    shapes; the unfused chain as fast as before), which took the attention what-if's
    saving from about 1 ms a step to 0-0.4 ms and slowed every SDPA model the run
    stepped after it (2026-11-28)."""
    import mmap

    per_fault = []
    for _ in range(_FAULT_PROBE_ROUNDS):
        # private and anonymous, as malloc maps memory (a shared mapping faults slower);
        # none to be had (a memory limit): no measurement, and no finding rests on one
        try:
            region = mmap.mmap(-1, _FAULT_PROBE_BYTES,
                               flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, ValueError):
            return None
        try:
            x = torch.frombuffer(region, dtype=torch.float32)
            fill: Callable[[float], Any] = partial(_serial_fill, x) if one_thread \
                else x.fill_
            minor0 = machine.faults()[0]
            t0 = time.perf_counter()
            fill(1.0)
            first = time.perf_counter() - t0
            faults = machine.faults()[0] - minor0
            t0 = time.perf_counter()
            fill(2.0)
            again = time.perf_counter() - t0
            del x, fill
        finally:
            region.close()
        if faults > 0:
            per_fault.append((first - again) * 1e6 / faults)
    return statistics.median(per_fault) if per_fault else None


def measured_fault_us() -> tuple[float, float] | None:
    """What a minor page fault adds to a step here, in microseconds of wall time: (on all
    of torch's threads, on one). 64 MiB freshly mapped are filled
    (fill_ of a tensor over them: the kernel finds and zeroes each page as the fill first
    writes it), less the same fill again, over the faults the process counted
    (``_fault_probe``), once on the run's threads and once on one thread. A
    step's faults fall between, nearer one thread's: a fault is taken by the thread that
    touches the page. On the development machine (2 threads) 0.6-0.7 us and 1.1 us;
    measured in steps, 0.97 us (the planted model that maps 64 MiB afresh in each call,
    a large fill) and 1.18 us (transformer training, faults in many smaller operators:
    3,077 a step, 3.6 ms less a step with glibc's malloc told to keep its memory). On
    several threads at once it can also be far slower: 7.3 us against 1.0 us on one, in
    a process that had just profiled seq2seq (2 GB resident; the threads' faults contend
    in the kernel). About 0.2 s in all, once per process. None when no fault was counted
    (memory kept or locked) or a time is not positive."""
    if not _fault_us:
        spread, one = _fault_probe(), _fault_probe(one_thread=True)
        _fault_us.append((spread or 0.0, one or 0.0))
    spread, one = _fault_us[0]
    if spread <= 0 or one <= 0:
        return None
    return spread, one


@contextlib.contextmanager
def _filtered_native_stderr(*dropped: bytes):
    """Drop kineto's "USDT: ... profiler_start/stop" lines, which no setting turns off,
    and any line holding one of ``dropped`` (kineto's own words for a failure that
    reporter then states in its one line).

    They are written by C++ straight to file descriptor 2, so for the duration the
    descriptor is a pipe, and a thread passes every other line on to the real
    standard error as it comes: a CUDA or NCCL message written just before the
    process dies is not lost with it.
    """
    try:
        read_fd, write_fd = os.pipe()
    except OSError:
        yield
        return
    saved = os.dup(2)
    out = os.dup(saved)  # the thread's own: it may outlive this block (forked workers)

    def forward() -> None:
        with os.fdopen(read_fd, "rb", buffering=0) as pipe, \
                os.fdopen(out, "wb", buffering=0) as dest:
            for line in pipe:
                if not line.startswith(b"USDT:") and not any(d in line for d in dropped):
                    dest.write(line)

    sys.stderr.flush()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    thread = threading.Thread(target=forward, name="reporter-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer here: the thread sees its end
        os.close(saved)
        thread.join(timeout=1.0)


def _sync(device: str) -> None:
    devices.get(device).synchronize()


def _timed(step: Callable[[], None], device: str, steps: int) -> float:
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return time.perf_counter() - start


# A step longer than the timing budget over this many is timed in windows of one step: a
# window of three would take longer than the whole budget, and the windows the median
# needs many times it (the large preset's cnn on a GPU, seconds a step in the CPU's
# augmentation, took 5 windows x 3 steps per mode).
LONG_STEP_BUDGETS = 3


def window_s(opts: RunOptions, budget_s: float | None) -> float:
    """How long a timed window should take: ``opts.window_s``, or less, so that the
    ``opts.windows`` windows that are always timed fit in ``budget_s``."""
    return opts.window_s if budget_s is None else min(opts.window_s, budget_s / opts.windows)


def window_steps(stepper: Callable[[], None], device: str, opts: RunOptions,
                 budget_s: float | None = None) -> int:
    """Steps in one timed window: about ``window_s`` from one timed step, 3 to 200; fewer
    (at least 1) when 3 such steps would not fit in it, and 1 when that step is longer
    than ``budget_s`` / LONG_STEP_BUDGETS."""
    one = _timed(stepper, device, 1)
    if budget_s is not None and one > budget_s / LONG_STEP_BUDGETS:
        return 1
    return _steps_for(window_s(opts, budget_s), one, minimum=3 if budget_s is None else 1)


def _steps_for(seconds: float, step_s: float, minimum: int = 1) -> int:
    """Steps of ``step_s`` in a window of ``seconds``: 3 to 200 where 3 fit, else down to
    ``minimum``."""
    fit = seconds / max(step_s, 1e-6)
    return max(3, min(200, round(fit))) if fit >= 3 else max(minimum, math.floor(fit))


# A first window this many times longer than it should be was sized on an unrepresentative
# step (a cache warm on the one timed step, a sleep that comes every few steps): it is cut
# there and dropped, and the windows are sized again from the steps it ran.
RESIZE_OVER = 2.0


# A machine busy enough to stretch the windows stops the timing at this many budgets,
# with at least two windows: the run says it was busy rather than wait it out.
BUSY_BUDGET = 3


def _timed_windows(window: Callable[[int], float], opts: RunOptions, budget_s: float,
                   progress: Callable[[str], None], steps: int
                   ) -> tuple[list[float], list[Disturbance], int]:
    """Timed windows of ``steps`` steps (``window(steps)``: the seconds they took), each
    with its disturbance, as samples/s per step (the caller multiplies by the batch): at
    least ``opts.windows``, then more until the median of the undisturbed ones has a 95%
    interval within +-``opts.precision`` (and there are MIN_CLEAN of them), or
    ``budget_s`` is spent. A first window that runs RESIZE_OVER times longer than
    ``window_s`` is cut there, dropped, and the windows sized again from its steps, so that
    the windows keep to the budget whatever the one step that sized them. In a
    distributed run exactly ``opts.windows`` of ``steps`` (the ranks' collectives pair
    step by step). Also returns the steps of the windows kept."""
    threads = torch.get_num_threads()

    def watched(n: int) -> tuple[float, Disturbance]:
        watch = machine.Watch(threads)
        value = n / max(window(n), 1e-9)
        return value, watch.stop()

    def probe(n: int, limit_s: float) -> tuple[float, Disturbance, int]:
        """The first window, in chunks of 1, 2, 4... steps (a synchronisation between
        them): samples/s, its disturbance and the steps it ran, fewer than ``n`` when it
        was cut at ``limit_s``."""
        watch = machine.Watch(threads)
        done, spent, chunk = 0, 0.0, 1
        while done < n:
            k = min(chunk, n - done)
            spent += window(k)
            done, chunk = done + k, chunk * 2
            if done < n and spent > limit_s:
                break
        return done / max(spent, 1e-9), watch.stop(), done

    if opts.agree is not None:
        progress(f"timing {opts.windows} windows x {steps} steps")
        pairs = [watched(steps) for _ in range(opts.windows)]
        return [v for v, _ in pairs], [d for _, d in pairs], steps
    progress(f"timing windows of {steps} steps (up to {budget_s:g} s, until +-"
             f"{opts.precision:.0%})")
    windows: list[float] = []
    disturbance: list[Disturbance] = []
    start = time.perf_counter()
    aim = window_s(opts, budget_s)
    probed = False
    while len(windows) < opts.max_windows:
        if not probed:
            value, d, done = probe(steps, RESIZE_OVER * aim)
            probed = True
            if done < steps:  # cut: the step that sized the windows was not like the others
                steps = _steps_for(aim, 1 / value)
                progress(f"the steps take {1 / value:.2g} s, not the sizing step's: windows "
                         f"of {steps} steps instead")
                continue
        else:
            value, d = watched(steps)
        windows.append(value)
        disturbance.append(d)
        clean = [w for w, x in zip(windows, disturbance) if not x.disturbed]
        if len(windows) >= opts.windows and len(clean) >= min(MIN_CLEAN, opts.windows):
            interval = median_interval(clean)
            if interval and interval.confidence >= 0.95 and \
                    interval.half_width(statistics.median(clean)) <= opts.precision:
                break
        spent = time.perf_counter() - start
        if len(windows) >= opts.windows and spent >= budget_s:
            break
        if len(windows) >= 2 and spent >= BUSY_BUDGET * budget_s and \
                len(clean) < len(windows):  # a busy machine: it will not get quieter here
            break
    busy = sum(d.disturbed for d in disturbance)
    if busy:
        progress(f"{busy} of {len(windows)} windows disturbed by other work on the machine"
                 " (left out of the median)")
    return windows, disturbance, steps
