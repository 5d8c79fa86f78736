"""Profile a target: warm-up, honest timing, then a short profiled window.

The runner returns a Run and writes nothing but the raw Chrome trace, which it
exports into a scratch folder that the caller owns (the store moves it into
the run folder).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import platform
import re
import resource
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import profile, record_function, schedule

from ..analyze import peaks as peaks_module
from ..analyze.breakdown import DRAIN_MARK, MODULE_MARK
from ..analyze.peaks import Peaks
from ..errors import BadInput, WorkFailed, signalled, user_code
from ..ingest.traces import read_trace
from ..model.contention import MIN_CLEAN, Disturbance
from ..model import device as kinds
from ..model.profile import Profile
from ..model.run import Run, Section, Throughput
from ..model.stats import median_interval
from . import calibrate, machine
from .whatif import Recorded, tensors_mapped
from . import device as devices
from .inductor import attach, compiled_model, kernel_sources
from .isa import guard as guard_isa
from .memprof import tensor_memory
from .target import BUILTINS, Target, build

Progress = Callable[[str], None]


@dataclass
class RunOptions:
    device: str = "auto"  # auto | cuda | cpu
    preset: str = "default"
    warmup_steps: int = 2  # then one more, timed, sizes the windows
    windows: int = 5  # un-profiled timed windows: at least these (exactly, with ranks)
    window_s: float = 0.25  # aim for windows this long (and at least 3 steps)
    # Seconds of timed windows per target (shared by its modes): windows are added until
    # the median's 95% interval is within +-precision, or until the budget is spent.
    time_budget_s: float = 1.5
    precision: float = 0.02
    max_windows: int = 200
    profile_steps: int = 3  # active steps of the profiler schedule: at least these,
    max_profile_steps: int = 10  # up to these when steps are short (see below)
    profile_s: float = 0.1  # aim for a profiled window this long
    # In a distributed run, how ranks settle on a number they must share (the
    # steps per timed window: DDP's collectives pair up step by step).
    agree: Callable[[int], int] | None = None
    threads: int | None = None  # torch's intra-op threads while profiling (None: as set)


# The large preset's biggest step (transformer training) allocated 31.6 GB on an H100:
# below this much device memory a CUDA run without --preset takes the default sizes.
LARGE_PRESET_MEMORY_B = 40 << 30


def default_preset(device: str, preset: str | None, memory_b: int | None = None) -> str:
    """The preset asked for; without one, on CUDA the sizes that fill a GPU when the
    device holds them (``memory_b``: its memory; None reads it), else the default ones
    (the default preset's models are CPU-sized: on a GPU their kernels are all launch
    latency, and the report says so)."""
    if preset:
        return preset
    if not kinds.is_gpu(device):
        return "default"
    if memory_b is None:
        memory_b = devices.get(device).properties().total_memory
    return "large" if memory_b >= LARGE_PRESET_MEMORY_B else "default"


def resolve_device(requested: str) -> str:
    if kinds.cuda_api(requested) and ":" in requested and devices.cuda_available():
        return requested  # a rank's own GPU in a distributed run
    if requested not in ("auto", "cuda", "cpu"):
        raise BadInput(f"unknown device {requested!r}; use auto, cuda or cpu",
                       error_id="bad-device")
    has_cuda = devices.cuda_available()
    if kinds.cuda_api(requested) and not has_cuda:
        raise BadInput("--device cuda: no CUDA device is available to torch "
                       f"{torch.__version__} (use --device cpu or auto)", error_id="no-cuda")
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    return requested


def environment(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": calibrate.cpu_name(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "cuda": torch.version.cuda,
        "cudnn": None,
        "driver": None,
        "device_name": "CPU",
        "device_memory_b": None,
    }
    dev = devices.get(device)
    props = dev.properties()
    if props is not None:
        env.update(device_name=props.name, device_memory_b=props.total_memory,
                   cudnn=dev.cudnn_version(), driver=dev.driver(),
                   capability=f"{props.major}.{props.minor}")
    return env


def _reset_host_peak() -> None:
    """Start a new peak-RSS window (Linux: writing 5 to clear_refs resets VmHWM)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # elsewhere the peak is the process's since it started


def _proc_status_b(field: str) -> int | None:
    """A memory field of /proc/self/status (Linux: "VmRSS:", "VmHWM:"), in bytes; else None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _host_rss_b() -> int | None:
    """The process's resident memory now (Linux), else None."""
    return _proc_status_b("VmRSS:")


def _host_peak_b() -> int:
    """The process's peak resident memory since _reset_host_peak (else since it started)."""
    peak = _proc_status_b("VmHWM:")
    if peak is not None:
        return peak
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


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


def _to_device(batch: Any, device: str, non_blocking: bool) -> Any:
    return tensors_mapped(batch, lambda t: t.to(device, non_blocking=non_blocking))


class _Stepper:
    """One step of a target in one mode, with the phase marks of the seeds."""

    def __init__(self, target: Target, mode: str, device: str):
        self.target, self.mode, self.device = target, mode, device
        self._tensors = devices.get(device).tensor_device  # where the inputs go
        self._it = iter(target.batches)
        self._forward = target.forward or (lambda model, batch: model(batch[0]))
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(target.autocast or "")
        device_type = self._tensors.split(":")[0]
        self._autocast = (lambda: torch.autocast(device_type, dtype=dtype)) if dtype \
            else contextlib.nullcontext
        # the model's modules and their modes as the target handed it over (set by
        # _profile_target before the first step changes them): the user's own path
        self.as_built: list[tuple[Any, bool]] | None = None
        if hasattr(target.model, "train"):
            target.model.train(mode == "train")
        self._copies = not device.startswith("cpu")  # inputs move to the device
        # A what-if's change to each batch as it is loaded (whatif.single_precision)
        self.cast: Callable[[Any], Any] | None = None

    def _next_batch(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            self._it = iter(self.target.batches)
            return next(self._it)

    def __call__(self) -> None:
        self.run(self.load())

    def load(self) -> Any:
        """The next batch, on the device."""
        with record_function("data_loading"):
            batch = self._next_batch()
            if self.cast is not None:
                batch = self.cast(batch)
        if self._copies:
            with record_function("input_copy"):
                batch = _to_device(batch, self._tensors, self.target.non_blocking)
        return batch

    def forward_as_user(self, batch: Any) -> Any:
        """The forward on one batch as the target's own code runs it: the process's grad
        mode, the model's modes as they are, no inference_mode of the runner's."""
        with self._autocast():
            return self._forward(self.target.model, batch)

    def run(self, batch: Any) -> None:
        """The model's part of the step on one batch."""
        t = self.target
        if self.mode == "inference":
            with torch.inference_mode(), self._autocast(), record_function("forward"):
                self._forward(t.model, batch)
            return
        with self._autocast():
            with record_function("forward"):
                out = self._forward(t.model, batch)
            with record_function("loss"):
                assert t.loss is not None  # Target.check: training has a loss
                loss = t.loss(out, batch)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer_step"):
            assert t.optimizer is not None  # Target.check: training has an optimizer
            t.optimizer.step()
            t.optimizer.zero_grad(set_to_none=True)


# Modules whose forward changes with their training mode: dropout and batch norm.
_MODE_LAYERS = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._NormBase)


def _modes(model: Any) -> list[tuple[Any, bool]] | None:
    """Each module of ``model`` and its training mode (None: not an nn.Module)."""
    if not isinstance(model, torch.nn.Module):
        return None
    return [(m, m.training) for m in model.modules()]


@contextlib.contextmanager
def _in_modes(modes: list[tuple[Any, bool]] | None):
    """The modules in the given modes inside the block, each put back after."""
    now = [(m, m.training) for m, _ in modes or []]
    for m, training in modes or []:
        m.training = training
    try:
        yield
    finally:
        for m, training in now:
            m.training = training


def _state_seen() -> tuple[Callable[[], None], dict[str, bool]]:
    """A global forward pre-hook that notes, at the first module call it sees, the grad
    mode and anomaly detection in effect there (inside the target's own forward, where a
    ``with detect_anomaly():`` of its own is in effect); returns its remover and the
    notes."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    seen: dict[str, bool] = {}

    def note(module: Any, args: Any) -> None:
        if not seen:
            seen.update(grad_enabled=torch.is_grad_enabled(),
                        anomaly=torch.is_anomaly_enabled())
    return register_module_forward_pre_hook(note).remove, seen


def _observe(stepper: "_Stepper", threads_set: bool) -> dict[str, Any]:
    """The process state around one step of ``stepper`` as the runner runs it (the
    step runs here: the warm-up's last), and what the runner set itself (run.Section.process):
    for a training step the grad mode seen inside it, anomaly detection (set for the
    process or entered inside the step), cuDNN's auto-tuner, deterministic algorithms,
    the default dtype and torch's threads."""
    anomaly = torch.is_anomaly_enabled()
    remove, seen = _state_seen()
    try:
        stepper()
    finally:
        remove()
    process: dict[str, Any] = {
        "anomaly": bool(anomaly or seen.get("anomaly") or torch.is_anomaly_enabled()),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "default_dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        "threads": torch.get_num_threads(), "runner_threads": threads_set,
        "runner_inference_mode": stepper.mode == "inference",
        "runner_eval": stepper.mode == "inference" and hasattr(stepper.target.model, "train")}
    if stepper.mode == "train" and "grad_enabled" in seen:
        process["grad_enabled"] = seen["grad_enabled"]
    return process


def _probe_inference(stepper: "_Stepper") -> dict[str, Any]:
    """One forward of an inference-only target as the user's own code would run it: the
    process's grad mode, the model's modules in the modes the target handed them over in
    (``as_built``), no inference_mode or eval() of the runner's. What it found: the grad
    mode in the forward, the modules in training mode (and those of dropout and batch norm
    among them), whether its output holds an autograd graph, and the bytes of the
    activations that graph saved for backward (torch.autograd.graph.saved_tensors_hooks;
    each storage once, the model's own parameters and buffers left out). Empty for a
    model that is not an nn.Module, or a compiled one."""
    model, built = stepper.target.model, stepper.as_built
    if built is None or compiled_model(model):
        return {}  # a compiled model would compile again for the other grad mode
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        try:
            storage = t.untyped_storage()
            if storage.data_ptr() not in own:
                saved[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, TypeError, AttributeError):
            pass  # a tensor without storage (a subclass, a meta tensor)
        return t

    batch = stepper.load()
    remove, seen = _state_seen()
    graph = [False]
    try:
        with _in_modes(built), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = stepper.forward_as_user(batch)

            def note(t: torch.Tensor) -> torch.Tensor:
                graph[0] = graph[0] or t.grad_fn is not None
                return t
            tensors_mapped(out, note)
            if not isinstance(out, (torch.Tensor, list, tuple, dict)):  # a ModelOutput
                for value in getattr(out, "values", lambda: [])():
                    tensors_mapped(value, note)
            del out
    finally:
        remove()
    return {"grad_enabled": seen.get("grad_enabled", torch.is_grad_enabled()),
            "training_modules": sum(training for _, training in built),
            "training_layers": sum(training for m, training in built
                                   if isinstance(m, _MODE_LAYERS)),
            "probe_grad_fn": graph[0], "probe_saved_b": sum(saved.values())}


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


def _profiled_steps(stepper: Callable[[], None], device: str, prof: Any, skipped: int,
                    active: int, align: Callable[[], Any] | None = None,
                    faults: list[tuple[int, int]] | None = None) -> float:
    """Run the profiler's schedule; the seconds the ``active`` (recorded) steps took.

    On a GPU the recorded window is closed at both ends, so that it holds exactly the
    device work of the recorded steps. The device is synchronised before the
    ``prof.step()`` that starts the recording (the recording begins inside that call:
    a synchronisation after it would be recorded, and the kernels of the steps before
    it, still queued, would run and be counted inside the window). The last recorded
    step ends by waiting for its own kernels, inside a ``device_drain`` mark: without
    it the host's last step ends while its kernels still run, and the recorded steps
    hold less host time than the device work they queued. The recorded steps are
    timed with CUDA events on the stream.
    """
    dev = devices.get(device)
    on_gpu = dev.is_gpu
    for i in range(skipped):
        stepper()
        if on_gpu and i == skipped - 1:
            dev.synchronize()  # before the recording starts: not recorded
            if align is not None:
                # the ranks start recording together: the first step's collective
                # otherwise holds the peers' skew, counted as communication
                align()
        prof.step()
    if faults is not None:  # the recorded steps' page faults: counted at both ends
        faults.append(machine.faults())
    if not on_gpu:
        total = 0.0
        for i in range(active):
            start = time.perf_counter()
            stepper()
            total += time.perf_counter() - start
            if faults is not None and i == active - 1:
                faults.append(machine.faults())
            prof.step()  # not timed: the last one stops the recording
        return total
    begin, end = dev.event(), dev.event()
    begin.record()
    for i in range(active):
        stepper()
        if i == active - 1:
            end.record()
            with record_function(DRAIN_MARK):
                # the whole device, not the current stream alone: work a target queued
                # on its own streams ends inside the recording too
                dev.synchronize()
            if faults is not None:
                faults.append(machine.faults())
        prof.step()  # after the last active step the recording stops
    return begin.elapsed_time(end) / 1e3


# CUDA errors after which the process's CUDA context is unusable: every later call fails
# with the same error (a device-side assert, a fault of the kernel).
_STICKY = ("device-side assert", "illegal memory access", "illegal instruction",
           "unspecified launch failure", "misaligned address", "invalid program counter",
           "hardware stack error", "uncorrectable ECC error")


def device_broken(exc: BaseException | None) -> str | None:
    """The CUDA error in ``exc`` or its causes that left the CUDA context unusable (so
    every later target would fail with it), or None."""
    seen = 0
    while exc is not None and seen < 16:
        text = str(exc)
        if any(s in text for s in _STICKY) and ("CUDA" in text or "cuda" in text):
            return text.strip().splitlines()[0][:200]
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _check_kernels(profile_obj: Profile) -> None:
    """Say so when a GPU run recorded no kernels: its times fall back to CPU time."""
    if profile_obj.self_device_us <= 0:
        print(f"reporter: warning: the {profile_obj.label} profile of a CUDA run holds no "
              "kernels (CUPTI unavailable, or taken by another profiler): the report shows "
              "CPU times only", file=sys.stderr, flush=True)


def _reset_device_memory(device: str) -> None:
    """Start the device's peaks from what this target holds, not from what the targets
    and modes before it left in the caching allocator."""
    devices.get(device).reset_peaks()


def _device_memory(profile_obj: Profile, device: str) -> dict[str, int]:
    """Peak device memory since _reset_device_memory, onto the profile too. Memory
    pressure is judged on the allocated peak: the reserved one includes the cache."""
    dev = devices.get(device)
    allocated, reserved = dev.memory_peaks()
    props = dev.properties()
    profile_obj.peak_device_mem_b = allocated
    profile_obj.device_mem_capacity_b = props.total_memory
    profile_obj.device_name = props.name
    return {"device_allocated_b": allocated, "device_reserved_b": reserved}


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


MAX_MODULE_DEPTH = 3  # module marks for the model and modules up to 3 levels inside it


@contextlib.contextmanager
def _module_marks(model: Any):
    """Mark each call of the model's modules (``module::<qualified name>``, the model
    itself by its class) for the step breakdown's per-module times. Global forward
    hooks, installed for the profiled window only: the timed windows run without them.
    Not on a compiled model: hooks that appear after its warm-up fail Dynamo's guards, and
    a record_function inside a compiled region breaks its graph, so the marks would make
    the model recompile inside the window and run differently from how it runs without
    them (found on transformer-compiled: three frames and two recompilations per step)."""
    if not isinstance(model, torch.nn.Module) or compiled_model(model):
        yield
        return
    names = {}
    for qualified, module in model.named_modules():
        if qualified.count(".") < MAX_MODULE_DEPTH:
            names[id(module)] = MODULE_MARK + (qualified or type(model).__name__)
    open_marks: list[Any] = []

    def before(module, args):
        name = names.get(id(module))
        if name is not None:
            mark = record_function(name)
            mark.__enter__()
            open_marks.append(mark)

    def after(module, args, output):
        if id(module) in names and open_marks:
            open_marks.pop().__exit__(None, None, None)

    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )
    handles = [register_module_forward_pre_hook(before), register_module_forward_hook(after)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        while open_marks:  # a forward that raised left its marks open
            open_marks.pop().__exit__(None, None, None)


def _profiled_step_count(windows: list[float], batch: int, opts: RunOptions) -> int:
    """Steps the profiler records: enough for a step breakdown that means something
    (``profile_s`` worth of steps, ``profile_steps`` to ``max_profile_steps``); exactly
    ``profile_steps`` in a distributed run, where every rank must record as many."""
    if opts.agree is not None or not windows or statistics.median(windows) <= 0:
        return opts.profile_steps
    step_s = batch / statistics.median(windows)
    return max(opts.profile_steps, min(opts.max_profile_steps, round(opts.profile_s / step_s)))


# Profiled windows tried at most, when other work on the machine disturbs them.
PROFILE_ATTEMPTS = 3


def _profile_once(stepper: _Stepper, device: str, active: int, trace: Path,
                  align: Callable[[], Any] | None = None,
                  faults: list[tuple[int, int]] | None = None) -> tuple[
        Profile, float, Disturbance]:
    """Profile ``active`` steps into the Chrome trace ``trace`` and read it back: the
    profile, the seconds the recorded steps took, and the window's disturbance. The page
    faults (minor, major) at the recorded steps' start and end go into ``faults``."""
    wait, warm = 1, 1
    prof = profile(activities=devices.get(device).activities(),
                   schedule=schedule(wait=wait, warmup=warm, active=active, repeat=1),
                   record_shapes=True, profile_memory=True)
    watch = machine.Watch(torch.get_num_threads())
    with _filtered_native_stderr(), _module_marks(stepper.target.model), prof:
        active_s = _profiled_steps(stepper, device, prof, wait + warm, active, align,
                                   faults)
    disturbance = watch.stop()
    # The profile is read back from the exported trace: the same numbers as
    # key_averages() (tests/test_traces.py), in a fraction of its time.
    # A trace kineto cannot write (a full disk, its folder removed) is told in one line by
    # _unreadable_trace: kineto's own "Failed to write to log file!" would be a second.
    with _filtered_native_stderr(_KINETO_WRITE_FAILED):
        prof.export_chrome_trace(str(trace))
    try:
        profile_obj = read_trace(trace, shapes=True)
    except BadInput as exc:  # torch wrote it: not the user's input
        raise _unreadable_trace(trace, exc) from exc
    _forwards_at(stepper.target.model, profile_obj)
    return profile_obj, active_s, disturbance


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _forwards_at(model: Any, profile: Profile) -> None:
    """Where the ``forward`` of the module around each operator read call by call
    (Profile.op_calls) is defined, "file:line", the file relative to the working folder
    when it lies under it: the module's mark names it (``_module_marks``), the trace holds
    no Python frames (the profiler runs without ``with_stack``, which would slow every
    call)."""
    if not profile.op_calls or not isinstance(model, torch.nn.Module):
        return
    modules = {(qualified or type(model).__name__): m for qualified, m in model.named_modules()}
    for calls in profile.op_calls.values():
        module = modules.get(calls.module or "")
        code = getattr(getattr(type(module), "forward", None), "__code__", None)
        if module is None or code is None or code.co_filename.startswith(_TORCH_DIR):
            continue  # torch's own module (nn.Linear...): its name says what it is
        path = code.co_filename
        try:
            relative = os.path.relpath(path)
            path = relative if not relative.startswith("..") else path
        except ValueError:  # another drive (Windows)
            pass
        calls.forward_at = f"{path}:{code.co_firstlineno}"


_KINETO_WRITE_FAILED = b"Failed to write to log file"

# Less free space than this where the trace is written: a cut-off trace is the full disk's.
_LOW_DISK_B = 64 << 20


def _unreadable_trace(trace: Path, exc: BadInput) -> WorkFailed:
    """Why torch's trace cannot be read, told apart: its folder was removed, the disk is
    full, or (the only other cause seen) a double quote in a record_function name."""
    if not trace.parent.is_dir():
        return WorkFailed(f"the folder torch wrote its trace into is gone ({trace.parent}): "
                          "another process removed it", error_id="io")
    try:
        fs = os.statvfs(trace.parent)
        free = fs.f_bavail * fs.f_frsize
    except OSError:
        free = None
    if free is not None and free < _LOW_DISK_B:
        return WorkFailed(f"no space left on the disk of {trace.parent} ({free:,} bytes free): "
                          "torch could not write its whole trace", error_id="io")
    if not trace.is_file():
        return WorkFailed(f"torch wrote no trace at {trace}", error_id="bad-trace")
    try:
        cut, quoted = _trace_damage(trace)
    except OSError as e:
        return WorkFailed(f"torch's trace {trace} cannot be read back: {e.strerror or e}",
                          error_id="io")
    if quoted:
        return WorkFailed(f"torch wrote a Chrome trace that cannot be read ({exc}); torch does "
                          'not escape a double quote (") in a record_function name',
                          error_id="bad-trace")
    if cut:
        return WorkFailed(f"torch's trace {trace} ends partway ({trace.stat().st_size:,} "
                          "bytes): the profiler stopped writing it (see torch's own message "
                          "above, if any)", error_id="bad-trace")
    return WorkFailed(f"torch wrote a Chrome trace that cannot be read ({exc})",
                      error_id="bad-trace")


# A name that a double quote ended early: the string closes and something other than a
# comma, a brace or a line end follows it ("name": "a"b").
_QUOTE_IN_NAME = re.compile(rb'"name": ?"(?:[^"\\\n]|\\.){0,65536}"[^,}\s]')


def _trace_damage(trace: Path) -> tuple[bool, bool]:
    """(the trace ends partway, a name in it holds an unescaped double quote): read line
    by line, only after the trace failed to parse."""
    with open(trace, "rb") as f:
        f.seek(max(0, trace.stat().st_size - 64))
        cut = not f.read().rstrip().endswith(b"}")
        f.seek(0)
        quoted = any(b'"name"' in line and _QUOTE_IN_NAME.search(line) for line in f)
    return cut, quoted


def _quietest_profile(stepper: _Stepper, device: str, opts: RunOptions, active: int,
                      trace: Path, progress: Progress,
                      faults: list[tuple[int, int]] | None = None
                      ) -> tuple[Profile, float, tuple[Disturbance, int]]:
    """Profile until a window is undisturbed, at most PROFILE_ATTEMPTS times (once in a
    distributed run: the ranks' collectives pair up); keep the least disturbed. Its
    trace ends up at ``trace``. Returns the profile, its recorded seconds, and (its
    disturbance, the attempts made)."""
    attempts = 1 if opts.agree is not None else PROFILE_ATTEMPTS
    best: tuple[Profile, float, Disturbance] | None = None
    made = 0
    for made in range(1, attempts + 1):
        progress(f"profiling {active} steps" + (f" (attempt {made})" if made > 1 else ""))
        candidate = trace.with_name(f"{trace.stem}.{made}{trace.suffix}")
        align = partial(opts.agree, 0) if opts.agree is not None else None  # a barrier
        counted: list[tuple[int, int]] = []
        got = _profile_once(stepper, device, active, candidate, align, counted)
        if best is None or (got[2].share or 0.0) < (best[2].share or 0.0):
            if best is not None:
                trace.unlink(missing_ok=True)
            os.replace(candidate, trace)
            best = got
            if faults is not None:
                faults[:] = counted
        else:
            candidate.unlink(missing_ok=True)
        if not got[2].disturbed:
            break
        progress(f"the profiled steps were disturbed by other work on the machine "
                 f"({got[2].share:.0%} of the thread time waited for a CPU)")
    assert best is not None
    progress("aggregating")
    return best[0], best[1], (best[2], made)


def _profile_section(stepper: _Stepper, label: str, device: str, opts: RunOptions,
                     scratch: Path, progress: Callable[[str], None],
                     budget_s: float) -> Section:
    on_gpu = devices.get(device).is_gpu
    gc.collect()
    _reset_host_peak()
    held = _host_rss_b()  # what the process held before: earlier targets, torch itself
    if on_gpu:
        # before the warm-up, which then pays the allocator's cudaMallocs that emptying
        # its cache brings back (in the first timed window they made it an outlier)
        _reset_device_memory(device)
    progress(f"warm-up ({opts.warmup_steps} steps)")
    for _ in range(opts.warmup_steps - 1):
        stepper()
    # the last warm-up step, watched: the process state around it (run.Section.process)
    process = _observe(stepper, opts.threads is not None)
    if stepper.mode == "inference" and "train" not in stepper.target.modes:
        process.update(_probe_inference(stepper))  # the user's own path, once
    steps = window_steps(stepper, device, opts, budget_s)
    if opts.agree is not None:
        steps = opts.agree(steps)
    batch = stepper.target.batch_size
    window_faults: list[tuple[int, int, int]] = []
    windows, disturbance, steps = _timed_windows(
        _counted(lambda n: _timed(stepper, device, n), window_faults), opts, budget_s,
        progress, steps)
    windows = [w * batch for w in windows]

    active = _profiled_step_count(windows, batch, opts)
    trace_name = f"trace-{label}.json"
    # The profiler's own cost, in the step's time and its page faults (its buffers, the
    # recorded shapes and allocations; on the CPU that is first-touch work that a share
    # of the profiled step then holds): as many steps without it, just before.
    unprofiled = None if opts.agree is not None else _unprofiled_cost(
        stepper, device, active, window_faults)
    counted: list[tuple[int, int]] = []
    profile_obj, active_s, quiet = _quietest_profile(stepper, device, opts, active,
                                                     scratch / trace_name, progress, counted)
    profiler_cost = None
    if unprofiled is not None and len(counted) == 2 and active_s > 0:
        (minor0, major0), (minor1, major1) = counted
        profiler_cost = {**{f"unprofiled_{k}": v for k, v in unprofiled.items()
                            if k != "steps"},
                         "steps": active, "profiled_step_us": active_s * 1e6 / active,
                         "profiled_minor_faults": (minor1 - minor0) / active,
                         "profiled_major_faults": (major1 - major0) / active}
        if not on_gpu and (call_us := measured_call_us()) is not None:
            profiler_cost["call_us"] = call_us
        # the page-faults finding is of CPU steps (a GPU's host runs ahead of the device)
        if not on_gpu and (fault_us := measured_fault_us()) is not None:
            # a step's faults cost about one thread's (see measured_fault_us): that, and
            # the spread fill's as the low end where it is lower
            spread, one = fault_us
            profiler_cost["fault_us"], profiler_cost["fault_us_low"] = one, min(spread, one)
            profiler_cost["page_b"] = resource.getpagesize()  # what one fault maps
    profile_obj.label = label
    if on_gpu:
        profile_obj.device_type = kinds.of(device, hip=torch.version.hip is not None).kind
        _check_kernels(profile_obj)
    host_peak = _host_peak_b()
    memory = {"host_peak_b": host_peak, "host_held_b": held,
              "host_net_peak_b": max(0, host_peak - held) if held is not None else None,
              "device_allocated_b": None, "device_reserved_b": None}
    precision: dict[str, Any] = {}
    if on_gpu:
        memory.update(_device_memory(profile_obj, device))
        precision = {"tf32": devices.get(device).tf32_state(),
                     "autocast": stepper.target.autocast or _recorded_autocast(
                         scratch / trace_name)}
    profiled = active * batch / active_s if active_s > 0 else 0.0
    from .whatif import failure, failure_text

    progress("memory profile (1 step)")
    try:
        loaded = stepper.load()  # outside the memory profile: the model's step is what counts
        with _filtered_native_stderr():
            tensors = tensor_memory(lambda: stepper.run(loaded), device)
    except BaseException as exc:  # an optional pass: the run keeps what it measured
        if _not_the_whatifs(exc):
            raise
        why = failure_text(failure(exc))
        print(f"reporter: warning: the memory profile of {label} failed ({why}); the report "
              "has no memory breakdown by category", file=sys.stderr, flush=True)
        tensors = "failed"
    return Section(label=label,
                   throughput=Throughput(windows=windows, steps_per_window=steps,
                                         profiled=profiled, disturbance=disturbance),
                   profile_disturbance=quiet[0], profile_attempts=quiet[1],
                   profile=profile_obj, memory=memory, precision=precision,
                   trace=trace_name,
                   tensor_memory=tensors if not isinstance(tensors, str) else None,
                   tensor_memory_note=tensors if isinstance(tensors, str) else None,
                   profiler_cost=profiler_cost, process=process)


def _recorded_autocast(trace: Path) -> str | None:
    """The autocast a model entered itself (inside its forward), as its trace shows it
    (None where the trace is too large to read again in the memory left)."""
    from ..analyze.shapes import recorded_autocast
    from ..ingest.traces import host_calls

    try:
        return recorded_autocast(host_calls(trace))
    except BadInput:
        return None


def _whatif(section: Section, batch_size: int | None, device: str, progress: Progress,
            optimizer: Any, trace: Path | Recorded | None = None,
            step: _Stepper | None = None) -> None:
    """Time on the device the replacements the section's findings propose (``step``: the
    section's step, for those that apply a fix to the model itself)."""
    from ..analyze.analyzer import analyze_section
    from .whatif import failure, failure_text, measure, target_fix, timeable

    findings = analyze_section(section, batch_size).findings
    rules = timeable(findings)
    # and the findings the target gives its own fix for (Target.fixes: timed on its step)
    rules += [f.rule for f in findings
              if f.rule not in rules and target_fix(step, f.rule) is not None]
    if not rules:
        return  # nothing to time
    progress(f"{section.label}: timing the proposed replacements")
    timed: dict[str, dict[str, Any]] = {}
    failed: dict[str, dict[str, Any]] = {}
    for attempt in range(1, PROFILE_ATTEMPTS + 1):
        # A what-if is optional: one that raises anything (the target's optimizer class
        # refusing a second instance, sys.exit, out of memory) or would not fit is not
        # timed, the others are, the run keeps its profile and the report says why. Only
        # a real Ctrl-C or a broken device stop the run.
        watch = machine.Watch(torch.get_num_threads())
        try:
            with _filtered_native_stderr():
                timed = measure(section, [r for r in rules if r not in failed], device,
                                optimizer, None, trace, failed, _not_the_whatifs, step=step)
        except BaseException as exc:  # outside any one what-if (reading the trace, say)
            if _not_the_whatifs(exc):
                raise
            why = failure(exc)
            failed.update({r: why for r in rules if r not in failed})
            section.whatif, section.whatif_failed = {}, dict(failed)
            section.whatif_note = _whatif_note(failed)
            progress(f"{section.label}: the replacements could not be timed "
                     f"({failure_text(why)[:120]})")
            return
        disturbance = watch.stop()
        if len(failed) > len(section.whatif_failed):
            section.whatif_failed = dict(failed)
            section.whatif_note = _whatif_note(failed)
            progress(f"{section.label}: not timed: {section.whatif_note[:160]}")
        if not timed:
            return  # nothing to time
        section.whatif_disturbance = disturbance
        if not disturbance.disturbed:
            section.whatif = timed
            return
        progress(f"{section.label}: the timed replacements were disturbed by other work on "
                 f"the machine ({disturbance.share:.0%} of the thread time waited for a "
                 f"CPU)" + ("; timing them again" if attempt < PROFILE_ATTEMPTS else
                            "; their estimates are kept instead"))
    section.whatif = {}  # a busy moment's timings: the report keeps the estimates


# The second timing of a section's replacements is left out where the first took longer
# than this (a step of seconds): on a shared host it guards a short timing against a few
# slow seconds, which a long one spans already.
WHATIF_AGAIN_MAX_S = 30.0


def _whatif_again(section: Section, device: str, progress: Progress, optimizer: Any,
                  trace: Path | Recorded | None = None, step: _Stepper | None = None) -> None:
    """Time the section's timed replacements a second time, after every section's first
    timing, and keep the two (``whatif.timed_twice``): on a shared host an operator's
    speed can change for seconds at a time with nothing this machine's counters see (the
    CPU's scaled_dot_product_attention at transformer's shapes, 2026-11-29: 285 us a call,
    then 415 us for 8 s, then 285 us again, the unfused chain and a GELU unchanged; one
    timing in such a stretch read the attention's saving as half of what it was before
    and after). Where the second timing fails or is disturbed, the first stands."""
    from .whatif import failure, failure_text, measure, timed_twice

    if not section.whatif:
        return
    progress(f"{section.label}: timing the proposed replacements again")
    watch = machine.Watch(torch.get_num_threads())
    try:
        with _filtered_native_stderr():
            again = measure(section, list(section.whatif), device, optimizer, None, trace,
                            {}, _not_the_whatifs, step=step)
    except BaseException as exc:
        if _not_the_whatifs(exc):
            raise
        progress(f"{section.label}: the second timing of the replacements failed "
                 f"({failure_text(failure(exc))[:120]}); the first stands")
        return
    if watch.stop().disturbed:
        progress(f"{section.label}: the second timing of the replacements was disturbed by "
                 "other work on the machine; the first stands")
        return
    section.whatif = {rule: timed_twice(first, again[rule]) if rule in again else first
                      for rule, first in section.whatif.items()}


def _not_the_whatifs(exc: BaseException) -> bool:
    """Is ``exc``, raised while a what-if ran, not that what-if's failure: a real Ctrl-C
    or SIGTERM, or a CUDA error that left the context unusable?"""
    return bool(device_broken(exc)) or (isinstance(exc, KeyboardInterrupt)
                                        and signalled() is not None)


def _whatif_note(failed: dict[str, dict[str, Any]]) -> str:
    """The what-ifs not timed, in one line (progress, --json's whatif_note)."""
    parts = []
    for rule, why in failed.items():
        if "exit" in why:
            parts.append(f"{rule}: the target called sys.exit({why['exit']})")
        elif "error" in why:
            parts.append(f"{rule}: {why['error']}")
        else:
            parts.append(f"{rule}: its operands would allocate {why['need_b']:,} bytes, "
                         f"over the cap of {why['cap_b']:,}")
    return "; ".join(parts)[:400]


def _peaks(device: str, progress: Progress) -> Peaks:
    """The datasheet's peaks of a GPU the table knows; else measured here, once per
    process (the default suite calibrates once), while the target's TF32 setting holds."""
    dev = devices.get(device)
    props = dev.properties()
    name, memory = (props.name, props.total_memory) if props is not None else (None, None)
    tf32 = bool(dev.tf32_state().get("matmul"))
    if peaks_module.lookup(name, memory) is None:
        progress("measuring the machine's peaks")

    def measure_once() -> tuple[Peaks, bool]:
        watch = machine.Watch(torch.get_num_threads())
        peaks = calibrate.measure(device, tf32)
        return peaks, watch.stop().disturbed

    peaks = peaks_module.for_run(device, name, memory, tf32, measure_once,
                                 torch.get_num_threads())
    if peaks.disturbed:
        progress("the peaks could not be measured on a quiet machine: no two "
                 "calibrations agreed")
    return peaks


def _benchmark(target: Target, device: str, progress) -> list[dict[str, Any]] | None:
    if target.benchmark is None:
        return None
    progress("side benchmark on the CPU")
    cpu = dict(target.benchmark("cpu"))
    gpu: dict[str, float] = {}
    dev = devices.get(device)
    if dev.is_gpu:  # a CPU run on a machine with a GPU times the CPU only
        progress("side benchmark on the GPU")
        gpu = dict(target.benchmark(dev.tensor_device))
    return [{"op": op, "cpu_ms": ms, "gpu_ms": gpu.get(op)} for op, ms in cpu.items()]


# TF32 lives with the device (reporter.collect.device): one helper, torch's two APIs.
_tf32 = devices.tf32
tf32_state = devices.tf32_state


def new_run_id(name: str, device: str, now: datetime) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[-40:].strip("-.")
    kind = device.split(":")[0]  # "cuda:0" (a rank's device): no colon in a folder name
    return f"{now:%Y%m%d-%H%M%S}-{safe or 'target'}-{kind}-{os.urandom(2).hex()}"


def _say_in_mode(progress: Callable[[str], None], mode: str, message: str) -> None:
    progress(f"{mode}: {message}")


def profile_target(spec: str, builder: Callable[..., Target], opts: RunOptions,
                   scratch: Path, progress: Progress = lambda _: None) -> Run:
    """Build and profile one target; the raw traces go into ``scratch`` (made if missing).

    ``builder`` comes from ``reporter.collect.target.resolve(spec)``.
    """
    # torch writes its trace into it; without it the failure read as a broken trace
    Path(scratch).mkdir(parents=True, exist_ok=True)
    guard_isa()  # before this process's first oneDNN call
    device = resolve_device(opts.device)
    name = spec
    now = datetime.now(timezone.utc)
    from .whatif import kept_state

    # torch's process-wide settings as they were before the target: what its code (or a
    # what-if's copy of its optimizer) changed is not the next target's
    with kept_state(), _threads(opts.threads):
        return _profile_target(spec, builder, opts, scratch, progress, device, name, now)


@contextlib.contextmanager
def _threads(count: int | None):
    """torch's intra-op threads set to ``count`` for the block (None: left as they are)."""
    if count is None:
        yield
        return
    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _profile_target(spec: str, builder: Callable[..., Target], opts: RunOptions,
                    scratch: Path, progress: Progress, device: str, name: str,
                    now: datetime) -> Run:
    progress("building")
    with user_code(f"target {spec} failed while building"):
        target = build(spec, builder, devices.get(device).tensor_device, opts.preset)
    sections = []
    batch_size = target.batch_size
    try:
        # A compiled model: Inductor says, as it compiles in the warm-up, which model code
        # each generated kernel came from (reporter.collect.inductor).
        with user_code(f"target {spec} raised while profiled"), \
                devices.get(device).tf32(bool(target.tf32)), \
                kernel_sources(isinstance(target.model, torch.nn.Module)
                               and compiled_model(target.model)) as sources:
            peaks = _peaks(device, progress)
            steppers = []
            as_built = _modes(target.model)  # before a step changes them
            for mode in target.modes:
                step = _Stepper(target, mode, device)
                step.as_built = as_built
                steppers.append(step)
                sections.append(_profile_section(
                    step, mode, device, opts, scratch, partial(_say_in_mode, progress, mode),
                    opts.time_budget_s / len(target.modes)))
            for section in sections:
                attach(section.profile.compiled, sources)
            benchmark = _benchmark(target, device, progress)
            # each section's trace read once, for both timings of its replacements
            traces = [Recorded(Path(scratch) / s.trace if s.trace else None)
                      for s in sections]
            spent: list[float] = []
            for section, trace, step in zip(sections, traces, steppers):
                section.peaks = peaks.to_dict()
                start = time.perf_counter()
                _whatif(section, batch_size, device, progress, target.optimizer, trace, step)
                spent.append(time.perf_counter() - start)
            for section, trace, step, took in zip(sections, traces, steppers, spent):
                if took > WHATIF_AGAIN_MAX_S:  # long steps: their one timing stands
                    progress(f"{section.label}: the replacements took {took:.0f} s to time; "
                             "timed once")
                    continue
                _whatif_again(section, device, progress, target.optimizer, trace, step)
            del traces, steppers
    finally:
        del target
        gc.collect()
    if benchmark is not None:
        sections[0].benchmark = benchmark
    builtin = BUILTINS.get(name)
    return Run(
        id=new_run_id(name, device, now), created=now.isoformat(timespec="seconds"),
        device=device,
        target={"name": name, "spec": spec, "preset": opts.preset,
                "batch_size": batch_size,
                "builtin": builtin is not None,
                "seed": builtin.seed if builtin and builtin.seed.isdigit() else None},
        env=environment(device), sections=sections)

