"""The critical path of a step: the chain of host and device work that sets its length.

Read from a Chrome trace's events (reporter.ingest.traces calls ``critical_path`` after the
step breakdown). The idea is HolisticTraceAnalysis's critical-path analysis: a graph of the
host's work on its threads, kernel launches (the runtime call -> its kernel, by correlation
id), kernels in stream order and synchronisations (the host call that waits -> the device
work it waited for), walked back once over all the profiled steps, from the end of the
last step or of the device work launched in the steps where that ends later, and cut at
the steps' edges (a step that ends on the host while its GPU still runs what it launched
is held by that work). Walking back, each piece of work is held up by the predecessor
that finished last, and that predecessor is the next link of the chain:

- on the host, time runs back continuously on one thread (whatever the thread does,
  charged to the host phase that covers it, as the breakdown does) until a call that
  waits for the device (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
  ``cudaEventSynchronize``, a blocking ``cudaMemcpy``, or a launch call longer than
  ``BLOCKED_LAUNCH_US``, which waited for room in a full launch queue) and in which
  device work ended: the chain goes on at the last such work, and the time from that
  work's end to the call's return is ``sync``;
- on the device, a piece of work runs from its start to its end; at its start it waited
  for the latest of: the work before it on its stream, its launch, or work on another
  stream that ended at most ``LATENCY_US`` before it started while both of those were
  ready long before (an event wait). Work queued for longer than ``LATENCY_US`` while
  other device work ended waited for the device: the chain goes on at the device work
  that ended last between its launch and its start (trace 13, its GPU busy 96% of the
  step, read 14.3% host and 10.2% launch links where launches had waited 42 ms in the
  queue). Otherwise the launch held the work up (the host was late): from the runtime
  call's start to the work's start is ``launch``, and the chain goes on on the launching
  thread. A gap after
  device work is ``latency`` when it lasts at most ``LATENCY_US`` (the device setting up
  the next work, as in the breakdown's idle time), else ``waiting``: the work was
  queued and ready by everything the trace shows, and waited on something it does not
  (an event, a dependency on work before the profiled window). Work with none of these
  predecessors (its launch is not in the trace, nothing before it on its stream) leaves
  the rest of the step ``unknown``.

So the chain tiles the step: its host, device and in-between parts sum to the step's
length. Each part is compared with all of that phase's or activity's time in the step:
the share that lies on the path. On a CPU trace the chain is the step's own thread: the
host phases, nothing more (``device`` False).

The host's own dependencies across threads (a thread that waits for another in a lock
or a queue) are not in the trace's events: the chain stays on the thread it is on.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from typing import Any

from ..model import vendors
from ..model.profile import LATENCY_US
from ..model.timeline import Event
from .breakdown import (
    HOST_PHASES,
    PRIORITY,
    Interval,
    _copy_kind,
    _length,
    intersect,
    overlap,
    phase_of,
    union,
)

DEVICE_KINDS = ("compute", "communication", "copy_h2d", "copy_d2h", "copy_d2d", "memset")
BETWEEN = ("launch", "latency", "waiting", "sync", "unknown")
# Host calls that may block until device work finishes.
WAITS = re.compile(r"Synchronize$|^(cuda|hip)Memcpy(Async)?$")
# A launch call this long (a launch takes a few us) waited for room in a full launch
# queue: a wait on the device, like a synchronisation.
BLOCKED_LAUNCH_US = 100.0
_RUNTIME = {"cuda_runtime", "Runtime", "cuda_driver", "Driver", "xpu_runtime",
            "mtia_runtime", "privateuse1_runtime"}
_COMM = re.compile("|".join(vendors.names("collectives")), re.IGNORECASE)  # NCCL, RCCL
_STEP, _WAIT, _UNSEEN = "step", "wait", object()


def _kind(cat: str, name: str) -> str:
    if cat in ("gpu_memcpy", "Memcpy"):
        return _copy_kind(name)
    if cat in ("gpu_memset", "Memset"):
        return "memset"
    return "communication" if _COMM.search(name) else "compute"


def _within(u: list[Interval], lo: float, hi: float) -> list[Interval]:
    """breakdown._clip by bisection: the part of a sorted, disjoint union inside [lo, hi]
    (its starts and its ends are both sorted)."""
    i = bisect_right(u, (lo, float("inf")))
    if i > 0 and u[i - 1][1] > lo:
        i -= 1
    j = bisect_left(u, (hi, float("-inf")))
    return [(max(a, lo), min(b, hi)) for a, b in u[i:j] if b > lo and a < hi]


class _Device:
    """Device work (kernels, copies, sets) indexed for the walk."""

    def __init__(self, device: list[Event], launch_of: dict[Any, tuple[Any, float]]):
        items = []
        kinds: dict[str, str] = {}  # by name: a kernel's name is never a copy's
        spans: dict[str, list[Interval]] = {k: [] for k in DEVICE_KINDS}
        launched = launch_of.get
        for e in device:
            args, name, ts, d = e.args, e.name, e.ts, e.dur
            kind = kinds.get(name)
            if kind is None:
                kind = kinds[name] = _kind(e.cat, name)
            end = ts + d if d > 0 else ts
            spans[kind].append((ts, end))
            items.append((ts, end, (e.pid, e.tid), kind,
                          launched(args.corr) if args is not None and args.corr is not None
                          else None))
        self.spans = spans
        # Sorted by start; each item's index; the one before it on its stream.
        items.sort(key=lambda w: (w[0], w[1]))
        self.items = items
        self.prev: list[int] = [-1] * len(items)
        last: dict[Any, int] = {}
        for i, w in enumerate(items):
            self.prev[i] = last.get(w[2], -1)
            last[w[2]] = i
        order = sorted(range(len(items)), key=lambda i: items[i][1])
        self.by_end = order
        self.ends = [items[i][1] for i in order]

    def last_launched(self, lo: float, hi: float) -> int:
        """The item with the latest end among those launched in [lo, hi], or -1."""
        best, end = -1, float("-inf")
        for i, w in enumerate(self.items):
            launch = w[4]
            if launch is not None and lo <= launch[1] <= hi and w[1] > end:
                best, end = i, w[1]
        return best

    def last_ending(self, after: float, upto: float) -> int:
        """The item with the latest end in (after, upto], or -1."""
        k = bisect_right(self.ends, upto) - 1
        if k >= 0 and self.ends[k] > after:
            return self.by_end[k]
        return -1


def _last_end(events: list[Any]) -> Any:
    """max(e.ts + max(e.dur, 0) for e in events), without two calls per event."""
    last: Any = None
    for e in events:
        ts, dur = e.ts, e.dur
        end = ts + 0 if dur < 0 else ts + dur
        if last is None or end > last:
            last = end
    return last


def critical_path(threads: dict[Any, list[Event]], device: list[Event], scale: float
                  ) -> dict[str, Any]:
    """The critical path of each profiled step (``ProfilerStep#N`` ranges; without them,
    the trace from its first host event to its last is one step), mean per step, in us:
    ``host_us`` per host phase, ``device_us`` per device activity, ``between_us`` (launch,
    latency, waiting, sync, unknown: see the module's doc), and the step's whole time of each
    host phase and device activity (``host_total_us``, ``device_total_us``: the union of its
    work inside the step). ``threads`` maps a thread to its host events sorted by start,
    ``device`` is the kernels, copies and sets; times times ``scale`` are microseconds.
    Empty without host events."""
    steps: list[tuple[float, float, Any]] = []
    marks: dict[str, list[Interval]] = {p: [] for p in PRIORITY}
    syncs: dict[Any, list[tuple[float, float]]] = {}
    launch_of: dict[Any, tuple[Any, float]] = {}
    names: dict[str, Any] = {}  # name -> its phase, _STEP, _WAIT or None
    runtime = _RUNTIME
    blocked = BLOCKED_LAUNCH_US / scale
    for key, events in threads.items():
        waits = []
        for e in events:
            name = e.name
            what = names.get(name, _UNSEEN)
            if what is _UNSEEN:
                what = names[name] = (phase_of(name) or
                                      (_STEP if name.startswith("ProfilerStep#") else
                                       _WAIT if WAITS.search(name) else None))
            if e.cat in runtime:
                args = e.args
                if args is not None and args.corr is not None:
                    launch_of[args.corr] = (key, e.ts)
                if what is _WAIT or (e.dur > blocked and "Launch" in name):
                    waits.append((e.ts + max(e.dur, 0), e.ts))
            elif what is None or what is _WAIT:
                continue
            elif what is _STEP:
                steps.append((e.ts, e.ts + max(e.dur, 0), key))
            else:
                marks[what].append((e.ts, e.ts + max(e.dur, 0)))
        if waits:
            syncs[key] = sorted(waits)
    if not steps:  # the trace is one step, from its first host event to its last
        ends: list[tuple[float, Any]] = [(_last_end(evs), key)
                                         for key, evs in threads.items() if evs]
        if not ends:
            return {}
        last, last_key = max(ends, key=lambda x: x[0])
        first = min(evs[0].ts for evs in threads.values() if evs)  # sorted by start
        steps = [(first, last, last_key)]
    windows = sorted(steps, key=lambda w: (w[0], w[1]))
    phases = {p: union(v) for p, v in marks.items()}
    dev = _Device(device, launch_of) if device else None
    kinds_u = {k: union(v) for k, v in dev.spans.items()} if dev is not None else {}
    eps = 1e-3 / scale
    latency = LATENCY_US / scale

    n = len(windows)
    host_on = dict.fromkeys(HOST_PHASES, 0.0)
    host_all = dict.fromkeys(HOST_PHASES, 0.0)
    dev_on = dict.fromkeys(DEVICE_KINDS, 0.0)
    dev_all = dict.fromkeys(DEVICE_KINDS, 0.0)
    between = dict.fromkeys(BETWEEN, 0.0)
    total = 0.0
    # One walk over all the steps, from the end of the work the last one launched, then
    # cut at the steps' edges: a step that ends on the host while the device still runs
    # what it launched is held by that work, not by the host's last launches (an H200 in
    # training, its GPU busy 99.2%, read 15.2% host when each step was walked from its
    # own end on the host).
    first, last = windows[0][0], windows[-1][1]
    start = -1
    if dev is not None:
        late = dev.last_launched(first, last)
        if late >= 0 and dev.items[late][1] > last:
            start = late
    host_path, device_path, gaps = _walk(first, last, windows[-1][2], syncs, dev, eps,
                                         latency, start)
    on_path = union(host_path)
    device_path = {k: union(v) for k, v in device_path.items()}
    gaps = {k: union(v) for k, v in gaps.items()}
    for lo, hi, _ in windows:
        total += hi - lo
        for k, u in device_path.items():
            dev_on[k] += _length(_within(u, lo, hi))
        for k, u in gaps.items():
            between[k] += _length(_within(u, lo, hi))
        mine_path = _within(on_path, lo, hi)
        covered: list[Interval] = []
        whole: list[Interval] = []
        for p in PRIORITY:
            part = _within(phases[p], lo, hi)
            host_all[p] += _length(part) - overlap(part, whole)
            whole = union(whole + part)
            mine = intersect(part, mine_path)
            host_on[p] += _length(mine) - overlap(mine, covered)
            covered = union(covered + mine)
        host_all["other"] += (hi - lo) - _length(whole)
        host_on["other"] += _length(mine_path) - _length(covered)
        for k, u in kinds_u.items():
            dev_all[k] += _length(_within(u, lo, hi))

    def mean(d: dict[str, float]) -> dict[str, float]:
        return {k: v * scale / n for k, v in d.items()}
    return {"steps": n, "step_us": total * scale / n, "device": dev is not None,
            "host_us": mean(host_on), "device_us": mean(dev_on) if dev else {},
            "between_us": mean(between) if dev else {},
            "host_total_us": mean(host_all), "device_total_us": mean(dev_all) if dev else {}}


def _walk(lo: float, hi: float, key: Any, syncs: dict[Any, list[tuple[float, float]]],
          dev: _Device | None, eps: float, latency: float, item: int = -1
          ) -> tuple[list[Interval], dict[str, list[Interval]], dict[str, list[Interval]]]:
    """The chain walked back to ``lo`` from ``hi`` on thread ``key``, or from the end of
    device work ``item`` where one is given: its host intervals, and its intervals per
    device activity and per kind of link between."""
    host: list[Interval] = []
    on_device: dict[str, list[Interval]] = {}
    links: dict[str, list[Interval]] = {}

    def link(kind: str, a: float, b: float) -> None:
        a = max(a, lo)
        if b > a:
            links.setdefault(kind, []).append((a, b))

    # on the device: the item whose end is t; else on the host, thread key
    t = hi if item < 0 else dev.items[item][1] if dev is not None else hi
    seen: set[int] = set()
    while t > lo:
        if item < 0:
            waits = syncs.get(key, []) if dev is not None else []
            j = bisect_right(waits, (t + eps, float("inf"))) - 1
            found = -1
            while j >= 0 and waits[j][0] > lo:
                end, start = waits[j]
                found = dev.last_ending(start, min(end, t) + eps) if dev is not None else -1
                if found >= 0 and found not in seen:
                    break
                found = -1
                j -= 1
            if found < 0:
                host.append((lo, t))
                break
            end = min(waits[j][0], t)
            if end < t:
                host.append((max(end, lo), t))
            w_end = min(dev.items[found][1], end) if dev is not None else end
            link("sync", w_end, end)
            t, item = w_end, found
            continue
        assert dev is not None
        seen.add(item)
        start, _, stream, kind, launch = dev.items[item]
        a = max(start, lo)
        if t > a:
            on_device.setdefault(kind, []).append((a, t))
        if start <= lo:
            break
        best, how, nxt, thread = float("-inf"), "unknown", -1, None
        p = dev.prev[item]
        if p >= 0 and p not in seen:
            best, how, nxt = min(dev.items[p][1], start), "queue", p
        if launch is not None and launch[1] <= start + eps and launch[1] > best:
            # Queued longer than the launch's latency while device work ended: that work
            # held it, not the host; else the host was late and its launch is the link.
            k = (dev.last_ending(launch[1], start + eps) if start - launch[1] > latency
                 else -1)
            if k >= 0 and k not in seen:
                best, how, nxt = min(dev.items[k][1], start), "queue", k
            else:
                best, how, nxt, thread = min(launch[1], start), "launch", -1, launch[0]
        if best < start - latency:
            k = dev.last_ending(max(best, start - latency), start + eps)
            if k >= 0 and k not in seen and dev.items[k][2] != stream:
                best, how, nxt, thread = min(dev.items[k][1], start), "queue", k, None
        if best == float("-inf"):
            link("unknown", lo, start)
            break
        if how == "queue":  # the device's own latency, or a wait the trace does not explain
            how = "latency" if start - best <= latency else "waiting"
        link(how, best, start)
        t = best
        if nxt >= 0:
            item = nxt
        else:
            item, key = -1, thread
    return host, on_device, links
