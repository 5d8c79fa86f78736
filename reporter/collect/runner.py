"""Profile a target: warm-up, honest timing, then a short profiled window.

The runner returns a Run and writes nothing but the raw Chrome trace, which it
exports into a scratch folder that the caller owns (the store moves it into
the run folder).
"""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch

from ..analyze import peaks as peaks_module
from ..analyze.peaks import Peaks
from ..errors import BadInput, user_code
from ..model import device as kinds
from ..model.contention import stays_busy
from ..model.run import Run, Section
from . import calibrate, machine
from . import device as devices
from .inductor import attach, compiled_model, kernel_sources
from .isa import guard as guard_isa
from .probes import _modes
from .profiling import PROFILE_ATTEMPTS, _not_the_whatifs, _profile_section
from .profiling import (
    MAX_MODULE_DEPTH as MAX_MODULE_DEPTH,
    _KINETO_WRITE_FAILED as _KINETO_WRITE_FAILED,
    _check_kernels as _check_kernels,
    _device_memory as _device_memory,
    _profiled_steps as _profiled_steps,
    _reset_device_memory as _reset_device_memory,
    _trace_damage as _trace_damage,
    _unreadable_trace as _unreadable_trace,
    device_broken as device_broken,
)
from .run_options import Progress, RunOptions
from .stepper import _Stepper
from .target import BUILTINS, Target, build
from .timing import _filtered_native_stderr
from .timing import (
    BUSY_BUDGET as BUSY_BUDGET,
    LONG_STEP_BUDGETS as LONG_STEP_BUDGETS,
    RESIZE_OVER as RESIZE_OVER,
    _SERIAL_FILL as _SERIAL_FILL,
    _fault_us as _fault_us,
    _serial_fill as _serial_fill,
    _step_median as _step_median,
    _steps_for as _steps_for,
    _sync as _sync,
    _timed as _timed,
    _timed_windows as _timed_windows,
    _unprofiled_cost as _unprofiled_cost,
    measured_call_us as measured_call_us,
    measured_fault_us as measured_fault_us,
    window_s as window_s,
    window_steps as window_steps,
)
from .whatif import Recorded


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
        "hip": getattr(torch.version, "hip", None),  # a ROCm build's HIP version
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
    before = None  # the attempt before this one: a second as disturbed stops (stays_busy)
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
        again = attempt < PROFILE_ATTEMPTS and not stays_busy(before, disturbance)
        progress(f"{section.label}: the timed replacements were disturbed by other work on "
                 f"the machine ({disturbance.share:.0%} of the thread time waited for a "
                 f"CPU)" + ("; timing them again" if again else
                            "; their estimates are kept instead"))
        if not again:
            break
        before = disturbance
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

