"""Where the step goes: host phases per profiled step, and device activity on a GPU.

Read from a Chrome trace's events (reporter.ingest.traces calls ``step_breakdown`` while
it aggregates them). Each profiled step is a ``ProfilerStep#N`` range; a trace
without them is one step, from its first host event to its last.

Host phases come from marks: the runner's own (``data_loading``, ``input_copy``,
``forward``, ``loss``, ``backward``, ``optimizer_step``; on a GPU, ``device_drain``
around its wait for the last recorded step's kernels) and the standard ones
torch writes by itself (``enumerate(DataLoader)#...``, ``Optimizer.step#...``,
``Optimizer.zero_grad#...``, ``autograd::engine::evaluate_function: ...`` on
whichever thread runs the backward pass). Marks nest and overlap, on one thread
and across threads; each instant of a step goes to one phase only, the first in
``PRIORITY`` that covers it (the inner mark of the usual nestings), and what no
mark covers is ``other``. So the phases of a step sum to the step exactly.

Device activity (GPU traces) is the union over streams of the step's kernels,
copies and sets: compute kernels first, then the communication they do not
hide, then copies by direction, then sets, and the rest of the step is idle.
Idle time is split by the queue first: while some work was queued (launched and not yet
started; work the trace holds no launch for, issued before the trace began, counts as
launched at its start), the device waited on itself: its launch latency where that
stretch lasted at most ``LATENCY_US``, else a dependency or an event. Only idle time with
nothing queued has a host cause: loading data, waiting in a synchronisation, or neither
(the host had not queued the work yet). Where more than one stream runs compute kernels,
each such stream's own idle time is split by its own queue (``Breakdown.stream_us``).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from itertools import accumulate
from typing import Any, Iterable

from ..model import vendors
from ..model.profile import LATENCY_US, Breakdown
from ..model.timeline import Event

Interval = tuple[float, float]

HOST_PHASES = ("data", "input_copy", "forward", "loss", "backward", "optimizer", "drain",
               "other")
# The GPU runner's mark around its wait for the last recorded step's kernels
# (reporter.runner._profiled_steps): the host waiting for the device.
DRAIN_MARK = "device_drain"
# Which phase an instant belongs to when several marks cover it.
PRIORITY = ("drain", "data", "input_copy", "optimizer", "backward", "loss", "forward")
DEVICE_ACTIVITIES = ("compute", "communication", "copy_h2d", "copy_d2h", "copy_d2d",
                     "memset", "idle_data", "idle_sync", "idle_latency", "idle_queued",
                     "idle_host")
# A gap of device idle time before queued work: see model.profile.LATENCY_US.
# A stream's own split: busy, then idle by cause (no data/sync split: that is the host's).
STREAM_ACTIVITIES = ("busy", "idle_latency", "idle_queued", "idle_host")

# the collective libraries' kernels (NCCL, RCCL: reporter.model.vendors)
_COMM_KERNEL = re.compile("|".join(vendors.names("collectives")), re.IGNORECASE)
_UNSEEN = object()  # a name not seen yet
_SYNC_CALL = re.compile(r"Synchronize|^(cuda|hip)Memcpy(Async)?$|^(cuda|hip)StreamWaitEvent$")


def phase_of(name: str) -> str | None:
    """The host phase a mark stands for, or None for anything else."""
    if name.startswith("enumerate(DataLoader)") or name == "data_loading":
        return "data"
    if name == "input_copy":
        return "input_copy"
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")) or name == "optimizer_step":
        return "optimizer"
    if name == "backward" or name.startswith("autograd::engine::evaluate_function"):
        return "backward"
    if name == "loss":
        return "loss"
    if name == "forward":
        return "forward"
    if name == DRAIN_MARK:
        return "drain"
    return None


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def overlap(a: list[Interval], b: list[Interval]) -> float:
    """Length of the intersection of two unions of intervals (each sorted, disjoint)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The intersection of two sorted, disjoint unions."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def queued_spans(starts: list[Interval]) -> list[Interval]:
    """When some work was queued: launched (its runtime call returned, or before the trace:
    a launch of minus infinity) and not yet started on the device; the union of each
    piece of work's (launch, start). ``starts``: (start on the device, launch on the
    host); work whose launch is unknown (an infinite launch) is left out."""
    return union((launch, start) for start, launch in starts if launch < start)


def _split_queued(idle: list[Interval], queued: list[Interval], latency: float
                  ) -> tuple[float, float, list[Interval]]:
    """Idle time split by the queue: (launch latency, waiting, nothing queued). Idle time
    with work queued is the launch's own latency where that stretch of it lasts at most
    ``latency``, else a wait on something other than the host (a dependency, an event);
    the rest of the idle time had nothing queued (the intervals, for the host's causes)."""
    short = waiting = 0.0
    for a, b in intersect(idle, queued):
        if b - a <= latency:
            short += b - a
        else:
            waiting += b - a
    return short, waiting, _minus(idle, queued)


def _clip(intervals: list[Interval], lo: float, hi: float) -> list[Interval]:
    """The part of a sorted, disjoint union inside [lo, hi]."""
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def _length(intervals: list[Interval]) -> float:
    return sum(b - a for a, b in intervals)


def _minus(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """a without b (both sorted, disjoint)."""
    out: list[Interval] = []
    j = 0
    for lo, hi in a:
        while j < len(b) and b[j][1] <= lo:
            j += 1
        k, start = j, lo
        while k < len(b) and b[k][0] < hi:
            if b[k][0] > start:
                out.append((start, b[k][0]))
            start = max(start, b[k][1])
            k += 1
        if start < hi:
            out.append((start, hi))
    return out


def copy_statistics(device: list[Event], windows: list[Interval], scale: float,
                    device_name: str | None = None, device_mem_b: int | None = None
                    ) -> list[dict[str, Any]]:
    """Copies that start inside the steps, per direction (h2d, d2h, d2d) and memory kind
    (pageable or pinned host memory, device, peer: from the copy's name, "Memcpy HtoD
    (Pageable -> Device)"): their count, bytes (the trace's "bytes" argument), time, the
    bandwidth they achieved (bytes over time) and the peak of their link where known
    (peaks.copy_peak). Copies without a byte count are left out."""
    from .peaks import copy_peak
    spans = sorted(windows)
    firsts = [lo for lo, _ in spans]
    groups: dict[tuple[str, str], list[Any]] = {}
    for e in device:
        if e.cat not in ("gpu_memcpy", "Memcpy"):
            continue
        copied = getattr(e.args, "copied", None) if e.args is not None else None
        if not isinstance(copied, (int, float)) or isinstance(copied, bool) \
                or not 0 <= copied < float("inf") or e.dur <= 0:
            continue
        i = bisect_right(firsts, e.ts) - 1
        if i < 0 or e.ts >= spans[i][1]:
            continue
        direction = _copy_kind(e.name)[len("copy_"):]
        kind = ("pageable" if "Pageable" in e.name else "pinned" if "Pinned" in e.name
                else "peer" if "PtoP" in e.name else "device")
        g = groups.setdefault((direction, kind), [0, 0.0, 0.0, e.name])
        g[0] += 1
        g[1] += copied
        g[2] += e.dur * scale
    rows = []
    for (direction, kind), (n, copied, us, name) in sorted(groups.items()):
        peak = copy_peak(direction, device_name, device_mem_b) if kind != "peer" else None
        achieved = copied / us / 1e3 if us > 0 else 0.0  # bytes per us / 1e3 = GB/s
        rows.append({"direction": direction, "kind": kind, "name": name, "copies": n,
                     "bytes": copied, "time_us": us, "gbps": achieved,
                     "peak_gbps": peak[1] if peak else None,
                     "link": peak[0] if peak else None,
                     "peak_share": achieved / peak[1] if peak else None})
    return rows


def _copy_kind(name: str) -> str:
    if "HtoD" in name:
        return "copy_h2d"
    if "DtoH" in name:
        return "copy_d2h"
    return "copy_d2d"  # DtoD, PtoP, and copies the name does not say


MODULE_MARK = "module::"  # the runner's marks around module calls: module::<qualified name>
MAX_MODULES = 30  # kept per profile, by forward + backward time


def _module_name(e: Any) -> str | None:
    name: str = e.name
    if name.startswith(MODULE_MARK):
        return name[len(MODULE_MARK):]
    if name.startswith("nn.Module: "):
        return name[len("nn.Module: "):]
    return None


def modules(threads: dict[Any, list[Event]], py_modules: list[Event], windows: list[Interval],
            scale: float) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """Forward and backward time per module, mean per step, and each module's depth.

    Forward: the union of the module's calls (the runner's ``module::`` marks, or the
    ``nn.Module:`` events of a with_stack trace). Backward: the autograd engine's
    ``evaluate_function`` events, each charged to the modules that were open when the
    forward operator with its sequence number ran (inclusive, like the forward)."""
    by_thread: dict[Any, list[Any]] = {}
    for key, events in threads.items():
        marks = [e for e in events if e.name.startswith(MODULE_MARK)]
        if marks:
            by_thread[key] = marks
    for e in py_modules:
        by_thread.setdefault((e.pid, e.tid), []).append(e)
    if not by_thread:
        return {}, {}, {}
    n = max(len(windows), 1)
    spans: dict[str, list[Interval]] = {}
    depth: dict[str, int] = {}
    owner: dict[Any, tuple[str, ...]] = {}  # sequence number -> open modules
    for key, marks in by_thread.items():
        marks.sort(key=lambda e: (e.ts, -e.dur))
        ops = [e for e in threads.get(key, ()) if e.args is not None and e.args.seq is not None
               and not e.name.startswith("autograd::engine")]
        stack: list[tuple[float, str]] = []
        mi = 0
        for op in ops + [None]:
            ts = op.ts if op is not None else float("inf")
            while mi < len(marks) and marks[mi].ts <= ts:
                m = marks[mi]
                mi += 1
                name = _module_name(m)
                if name is None:
                    continue
                while stack and stack[-1][0] <= m.ts:
                    stack.pop()
                end = m.ts + max(m.dur, 0)
                spans.setdefault(name, []).append((m.ts, end))
                depth.setdefault(name, len(stack))
                stack.append((end, name))
            if op is None:
                break
            while stack and stack[-1][0] <= ts:
                stack.pop()
            if stack:
                owner.setdefault(op.args.seq, tuple(name for _, name in stack))
    forward = {name: _length(_inside(union(v), windows)) * scale / n
               for name, v in spans.items()}
    backward: dict[str, float] = dict.fromkeys(forward, 0.0)
    for events in threads.values():
        for e in events:
            if e.args is None or e.args.seq is None or \
                    not e.name.startswith("autograd::engine::evaluate_function"):
                continue
            for name in owner.get(e.args.seq, ()):
                backward[name] += max(e.dur, 0) * scale / n
    kept = sorted(forward, key=lambda k: forward[k] + backward[k], reverse=True)[:MAX_MODULES]
    return ({k: forward[k] for k in kept}, {k: backward[k] for k in kept},
            {k: depth[k] for k in kept})


def _inside(intervals: list[Interval], windows: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for lo, hi in windows:
        out += _clip(intervals, lo, hi)
    return out


def _nearest_rank(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values by the nearest rank: the smallest value with at
    least a share q of the values at or below it."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def launch_statistics(device: list[Event], launches: list[Interval] | None,
                      windows: list[Interval], nothing_queued: list[float], scale: float
                      ) -> dict[str, float]:
    """How the host feeds the device, inside the steps: the delay from each kernel's
    launch (the end of its runtime call, as HTA measures it; a kernel that starts before
    the call returns waited 0) to the kernel's start, as median, p90 (nearest rank) and
    max; kernels launched per step (their launch inside a step); and the steps
    in which the queue ran dry: the device idled with nothing queued for more than
    LATENCY_US (``nothing_queued``, per step, us). Kernels only (not copies or sets), and only
    those whose launch the trace holds. A CUDA graph's kernels share its launch's
    correlation id: the graph is one launch, and only its first kernel waited for it
    (the others wait for the kernels before them in the graph). Empty without such
    kernels."""
    if launches is None or len(launches) != len(device) or not windows:
        return {}
    spans = sorted(windows)
    firsts = [lo for lo, _ in spans]

    def inside(t: float) -> bool:
        i = bisect_right(firsts, t) - 1
        return i >= 0 and t < spans[i][1]
    first_of: dict[Any, float] = {}  # correlation id -> its first kernel's start
    for e, (start, launch) in zip(device, launches):
        corr = e.args.corr if e.args is not None else None
        if corr is not None and e.cat in ("kernel", "Kernel") and math.isfinite(launch) \
                and start < first_of.get(corr, math.inf):
            first_of[corr] = start
    delays: list[float] = []
    launched = 0
    for e, (start, launch) in zip(device, launches):
        if e.cat not in ("kernel", "Kernel") or not math.isfinite(launch):
            continue
        corr = e.args.corr if e.args is not None else None
        if corr is not None and first_of.get(corr, start) != start:
            continue  # a later kernel of one launch (a CUDA graph's)
        if inside(start):
            delays.append(max(start - launch, 0.0) * scale)
        if inside(launch):
            launched += 1
    if not delays:
        return {}
    delays.sort()
    n = len(spans)
    dry = sum(1 for us in nothing_queued if us > LATENCY_US)
    return {"kernels": len(delays), "delay_median_us": _nearest_rank(delays, 0.5),
            "delay_p90_us": _nearest_rank(delays, 0.9), "delay_max_us": delays[-1],
            "launches_per_step": launched / n, "steps": n, "dry_steps": dry,
            "dry_share": dry / n}


# CUDA's launch queue holds this many launches per stream; a launch beyond it blocks the
# host until one ends (HTA's get_time_blocked_on_full_queue uses the same depth).
FULL_QUEUE = 1024


def queue_lengths(device: list[Event], launches: list[Interval] | None,
                  windows: list[Interval], scale: float) -> dict[str, dict[str, float]]:
    """Per stream, inside the steps: how many launches were outstanding (launched, their
    work not yet ended), as a time-weighted mean and a maximum, and the time per step
    the queue was full (``FULL_QUEUE`` or more). A launch is a correlation id: a CUDA
    graph's kernels are one launch, counted until its last one ends; work launched
    before the trace counts from the trace's start; work whose launch is unknown, not
    at all. Empty without launches."""
    if launches is None or len(launches) != len(device) or not windows:
        return {}
    spans: dict[Any, dict[Any, list[float]]] = {}  # stream -> launch -> [launch, end]
    for e, (start, launch) in zip(device, launches):
        if launch == float("inf") or e.pid is None or e.tid is None:  # no stream known
            continue
        corr = e.args.corr if e.args is not None else None
        key = corr if corr is not None else id(e)
        end = start + max(e.dur, 0)
        one = spans.setdefault((e.pid, e.tid), {}).get(key)
        if one is None:
            spans[(e.pid, e.tid)][key] = [min(launch, start), end]
        else:
            one[0], one[1] = min(one[0], launch), max(one[1], end)
    one_device = len({pid for pid, _ in spans}) == 1
    order = sorted(spans, key=lambda k: (_number_first(k[0]), _number_first(k[1])))
    wall = sum(hi - lo for lo, hi in windows)
    out: dict[str, dict[str, float]] = {}
    for key in order:
        changes: dict[float, int] = {}
        for a, b in spans[key].values():
            if b > a:
                changes[a] = changes.get(a, 0) + 1
                changes[b] = changes.get(b, 0) - 1
        times = sorted(changes)
        after = list(accumulate(changes[t] for t in times))  # the count after each change
        weighted = full = 0.0
        most = 0
        for lo, hi in sorted(windows):
            i = bisect_right(times, lo)  # the changes at or before lo are in
            count = after[i - 1] if i else 0
            at = lo
            while True:
                nxt = times[i] if i < len(times) and times[i] < hi else hi
                if nxt > at:
                    weighted += count * (nxt - at)
                    full += (nxt - at) if count >= FULL_QUEUE else 0.0
                    most = max(most, count)
                if nxt >= hi:
                    break
                count += changes[nxt]
                at, i = nxt, i + 1
        if most == 0 and weighted == 0:
            continue
        out[stream_name(key[0], key[1], one_device)] = {
            "mean": weighted / wall if wall > 0 else 0.0, "max": float(most),
            "full_us": full * scale / len(windows)}
    return out


def stream_name(pid: Any, tid: Any, one_device: bool) -> str:
    """How a stream is named: "stream 7", or "device 1 stream 7" beside other devices."""
    return f"stream {tid}" if one_device else f"device {pid} stream {tid}"


def _number_first(value: Any) -> tuple[int, float, str]:
    """Sorts stream and device ids as numbers where they are: 7 before 27."""
    try:
        return (0, float(value), "")
    except (TypeError, ValueError, OverflowError):  # OverflowError: an id of 10**400
        return (1, 0.0, str(value))


def _streams(device: list[Event], launches: list[Interval] | None
             ) -> dict[str, tuple[list[Interval], list[Interval]]]:
    """Per stream that runs compute kernels, when more than one does: the union of its
    work (kernels, copies, sets) and when work was queued on it (queued_spans).
    ``launches`` is aligned with ``device``; without it no launch is known."""
    never = float("inf")
    aligned = launches if launches is not None and len(launches) == len(device) else None
    work: dict[Any, list[Interval]] = {}
    starts: dict[Any, list[Interval]] = {}
    computing: set[Any] = set()
    for i, e in enumerate(device):
        if e.pid is None or e.tid is None:  # its trace does not say which stream: none of
            continue                        # them (a "stream None" would be no stream)
        key = (e.pid, e.tid)
        work.setdefault(key, []).append((e.ts, e.ts + max(e.dur, 0)))
        starts.setdefault(key, []).append(aligned[i] if aligned is not None else (e.ts, never))
        if e.cat in ("kernel", "Kernel") and not _COMM_KERNEL.search(e.name):
            computing.add(key)
    if len(computing) < 2:
        return {}
    one_device = len({pid for pid, _ in computing}) == 1
    order = sorted(computing, key=lambda k: (_number_first(k[0]), _number_first(k[1])))
    return {stream_name(pid, tid, one_device): (union(work[(pid, tid)]),
                                                queued_spans(starts[(pid, tid)]))
            for pid, tid in order}


def _outside_steps(calls: list[tuple[float, float, str]], windows: list[Interval],
                   scale: float) -> dict[str, list[float]]:
    """Per name of a call that waits (``_SYNC_CALL``), its time outside the steps (us, the
    whole trace) and its calls that lie wholly outside them: the profiler's own
    ``cudaDeviceSynchronize`` as the trace closes (158 ms on trace 07, 82 us after the last
    step) is no synchronisation of the model's."""
    spans = sorted(windows)
    firsts = [lo for lo, _ in spans]
    out: dict[str, list[float]] = {}
    for ts, end, name in calls:
        inside = _length(_inside([(ts, end)], spans))
        i = bisect_right(firsts, ts) - 1
        starts_inside = i >= 0 and ts < spans[i][1]
        if end - ts > inside or not starts_inside:
            row = out.setdefault(name, [0.0, 0.0])
            row[0] += (end - ts - inside) * scale
            row[1] += 0 if inside > 0 or starts_inside else 1
    return out


def step_breakdown(threads: dict[Any, list[Event]], steps: list[Interval], device: list[Event],
                   scale: float, py_modules: list[Event] | None = None,
                   launches: list[Interval] | None = None, device_name: str | None = None,
                   device_mem_b: int | None = None) -> Breakdown | None:
    """The breakdown of a trace: ``threads`` maps a thread to its host events (with
    name, ts, dur), ``steps`` are the ProfilerStep ranges (may be empty), ``device``
    the kernels, copies and sets (with cat, name, ts, dur), ``py_modules`` the
    ``nn.Module:`` events of a with_stack trace, ``launches`` (start on the device,
    launch on the host; infinite where the trace does not hold the launch), one per
    item of ``device``, in its order. Times are multiplied by ``scale`` into microseconds."""
    marks: dict[str, list[Interval]] = {p: [] for p in PRIORITY}
    sync: list[Interval] = []
    sync_named: list[tuple[float, float, str]] = []
    names: dict[str, Any] = {}
    first: float | None = None
    last: float | None = None
    for events in threads.values():
        if not events:
            continue
        first = events[0].ts if first is None else min(first, events[0].ts)
        for e in events:
            ts, dur = e.ts, e.dur
            end = ts + 0 if dur < 0 else ts + dur  # ts + max(dur, 0), without the call
            if last is None or end > last:
                last = end
            name = e.name
            kind = names.get(name, _UNSEEN)
            if kind is _UNSEEN:
                kind = names[name] = (phase_of(name) or
                                      ("sync" if _SYNC_CALL.search(name) else None))
            if kind is None:
                continue
            if kind == "sync":
                sync.append((ts, end))
                sync_named.append((ts, end, name))
            else:
                marks[kind].append((ts, end))
    if first is None or last is None:
        return None
    marked = bool(steps)
    windows = sorted(steps) if steps else [(first, last)]
    phases = {p: union(v) for p, v in marks.items()}
    sync_u = union(sync)

    device_sets: dict[str, list[Interval]] = {}
    if device:
        spans: dict[str, list[Interval]] = {"compute": [], "communication": [], "memset": [],
                                            "copy_h2d": [], "copy_d2h": [], "copy_d2d": []}
        pageable: list[Interval] = []
        for e in device:
            span = (e.ts, e.ts + max(e.dur, 0))
            cat = e.cat
            if cat in ("gpu_memcpy", "Memcpy"):
                spans[_copy_kind(e.name)].append(span)
                if "Pageable" in e.name:
                    pageable.append(span)
            elif cat in ("gpu_memset", "Memset"):
                spans["memset"].append(span)
            elif _COMM_KERNEL.search(e.name):
                spans["communication"].append(span)
            else:
                spans["compute"].append(span)
        device_sets = {k: union(v) for k, v in spans.items()}
        device_sets["pageable"] = union(pageable)

    queued = queued_spans(launches or [])
    latency = LATENCY_US / scale
    nothing_queued: list[float] = []  # per step, device idle with nothing queued
    # The streams that run compute kernels, each with its work and launches; split per
    # stream only where more than one computes.
    streams = _streams(device, launches) if device else {}
    steps_us: list[float] = []
    host: dict[str, list[float]] = {p: [] for p in HOST_PHASES}
    dev: dict[str, list[float]] = {k: [] for k in DEVICE_ACTIVITIES} if device else {}
    notes: dict[str, list[float]] = {"comm_overlapped": [], "copy_pageable": []} \
        if device else {}
    stream_us: dict[str, dict[str, list[float]]] = {}
    for lo, hi in windows:
        steps_us.append((hi - lo) * scale)
        covered: list[Interval] = []
        for p in PRIORITY:
            part = _clip(phases[p], lo, hi)
            host[p].append((_length(part) - overlap(part, covered)) * scale)
            covered = union(covered + part)
        host["other"].append(((hi - lo) - _length(covered)) * scale)
        if not device:
            continue
        busy: list[Interval] = []
        compute = _clip(device_sets["compute"], lo, hi)
        comm = _clip(device_sets["communication"], lo, hi)
        notes["comm_overlapped"].append(overlap(comm, compute) * scale)
        notes["copy_pageable"].append(_length(_clip(device_sets["pageable"], lo, hi)) * scale)
        for key in ("compute", "communication", "copy_h2d", "copy_d2h", "copy_d2d", "memset"):
            part = _clip(device_sets[key], lo, hi)
            dev[key].append((_length(part) - overlap(part, busy)) * scale)
            busy = union(busy + part)
        idle = _minus([(lo, hi)], busy)
        # The queue first: idle time with work queued is the device's own wait, whatever
        # the host did meanwhile; only idle time with nothing queued has a host cause.
        short, waited, dry = _split_queued(idle, _clip(queued, lo, hi), latency)
        data = _clip(phases["data"], lo, hi)
        in_data = overlap(dry, data)
        in_sync = overlap(_minus(dry, data), _clip(sync_u, lo, hi))
        dev["idle_data"].append(in_data * scale)
        dev["idle_sync"].append(in_sync * scale)
        dev["idle_latency"].append(short * scale)
        dev["idle_queued"].append(waited * scale)
        dev["idle_host"].append((_length(dry) - in_data - in_sync) * scale)
        nothing_queued.append(_length(dry) * scale)
        for name, (work, stream_queued) in streams.items():
            split = stream_us.setdefault(name, {k: [] for k in STREAM_ACTIVITIES})
            own = _clip(work, lo, hi)
            gaps = _minus([(lo, hi)], own)
            s_short, s_waited, s_dry = _split_queued(gaps, _clip(stream_queued, lo, hi),
                                                     latency)
            split["busy"].append(_length(own) * scale)
            split["idle_latency"].append(s_short * scale)
            split["idle_queued"].append(s_waited * scale)
            split["idle_host"].append(_length(s_dry) * scale)
    outside = _outside_steps(sync_named, windows, scale) if marked else {}
    forward, backward, depth = modules(threads, py_modules or [], windows, scale)
    launch = (launch_statistics(device, launches, windows, nothing_queued, scale)
              if device else {})
    copies = (copy_statistics(device, windows, scale, device_name, device_mem_b)
              if device else [])
    queue = queue_lengths(device, launches, windows, scale) if device else {}
    return Breakdown(steps_us=steps_us, host_us=host, device_us=dev, device_notes_us=notes,
                     stream_us=stream_us, launch=launch, copies=copies,
                     sync_outside=outside, queue=queue,
                     module_forward_us=forward, module_backward_us=backward,
                     module_depth=depth, marked=marked,
                     phases_found=any(any(v) for p, v in host.items() if p != "other"))
