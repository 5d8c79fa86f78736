"""A section's profile: the profiled window (_profile_once, the quietest of a few:
_quietest_profile), the damage a trace can come back with, the device's and host's memory
and kernels around it, and the section put together (_profile_section)."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import resource
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import profile, record_function, schedule

from ..analyze.breakdown import DRAIN_MARK, MODULE_MARK
from ..errors import BadInput, WorkFailed, signalled
from ..ingest.traces import read_trace
from ..model import device as kinds
from ..model.contention import Disturbance, stays_busy
from ..model.profile import Profile
from ..model.run import Section, Throughput
from . import machine
from . import device as devices
from .inductor import compiled_model
from .memprof import tensor_memory
from .probes import _observe, _probe_inference
from .run_options import Progress, RunOptions
from .stepper import _Stepper
from .timing import (
    _counted,
    _filtered_native_stderr,
    _timed,
    _timed_windows,
    _unprofiled_cost,
    measured_call_us,
    measured_fault_us,
    window_steps,
)


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
    distributed run: the ranks' collectives pair up), and no longer once an attempt is
    as disturbed as the one before (``stays_busy``); keep the least disturbed. Its
    trace ends up at ``trace``. Returns the profile, its recorded seconds, and (its
    disturbance, the attempts made)."""
    attempts = 1 if opts.agree is not None else PROFILE_ATTEMPTS
    best: tuple[Profile, float, Disturbance] | None = None
    before: Disturbance | None = None  # the attempt before this one
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
        if stays_busy(before, got[2]):
            progress("the machine stays busy: keeping the least disturbed attempt")
            break
        before = got[2]
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


def _not_the_whatifs(exc: BaseException) -> bool:
    """Is ``exc``, raised while a what-if ran, not that what-if's failure: a real Ctrl-C
    or SIGTERM, or a CUDA error that left the context unusable?"""
    return bool(device_broken(exc)) or (isinstance(exc, KeyboardInterrupt)
                                        and signalled() is not None)
