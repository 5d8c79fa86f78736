"""Read Chrome traces written by torch.profiler (export_chrome_trace, tensorboard_trace_handler).

From the events alone, compute what ``key_averages()`` reports: per operator
name the calls, self and total CPU time (from the nesting of host events on
each thread), self and total device time (kernels attributed to the operator
that launched them, by External id, else through the runtime call with the
same correlation id), and memory (``[memory]`` events attributed to the
innermost operator on their thread). Works for torch 1.8 traces (``Operator``,
``Runtime``, ``Kernel``) to today's (``cpu_op``, ``cuda_runtime``, ``kernel``),
plain or gzipped. No torch import.
"""

from __future__ import annotations

import gc
import gzip
import json
import re
import zlib
from collections import defaultdict
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import BadInput
from .profile import KIND_ANNOTATION, KIND_KERNEL, KIND_RUNTIME, Op, Profile, classify

# Host events that nest on a thread and count as CPU time, like key_averages' events.
HOST_CATS = {"cpu_op", "Operator", "user_annotation", "cuda_runtime", "Runtime",
             "cuda_driver", "Driver", "xpu_runtime", "mtia_runtime", "privateuse1_runtime"}
RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "Driver", "xpu_runtime",
                "mtia_runtime", "privateuse1_runtime"}
# Device work: kernels, copies and sets (AMD traces use the same categories).
DEVICE_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "mtia_ccp_events"}
DEVICE_ANNOTATION_CATS = {"gpu_user_annotation"}
_EPS = 1e-3  # microseconds of slack when deciding whether one event encloses another


def _open(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror}", error_id="bad-input") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadInput(f"{path}: the gzip stream is damaged or cut off ({exc})",
                           error_id="bad-trace") from exc
    return raw


_EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_OBJECT_START = re.compile(rb"\s*\{")
_CHUNK = 8 << 20


class _NotChunkable(Exception):
    """The fast path met something it cannot cut safely: start again with the plain parser."""


def _chunked_events(raw: bytes, meta: dict[str, Any]) -> Iterator[list[Any]]:
    """The traceEvents array a few MiB at a time; fills ``meta`` with the other fields.

    Each chunk is cut where one event object ends and the next begins, and is
    parsed on its own; a cut inside an event cannot parse (its brackets do not
    balance), so any failure raises _NotChunkable. Parsing and aggregating a
    chunk at a time keeps peak memory near the size of the file.
    """
    import orjson

    start = _EVENTS_START.search(raw)
    if start is None or not _OBJECT_START.match(raw):
        raise _NotChunkable
    head = raw[:start.start()].rstrip().rstrip(b",")
    try:
        if head.strip() != b"{":
            meta.update(orjson.loads(head + b"}"))
        pos = start.end()
        while True:
            cut = _BOUNDARY.search(raw, pos + _CHUNK)
            if cut is None:
                break
            chunk = orjson.loads(b"[" + raw[pos:cut.start() + 1] + b"]")
            pos = cut.end() - 1
            yield chunk
        # The rest: the last events, the array's end, then the other top-level fields.
        text = "[" + raw[pos:].decode("utf-8")
        last, end = json.JSONDecoder().raw_decode(text)
        tail = text[end:].strip()
        if tail.startswith(","):
            meta.update(orjson.loads("{" + tail[1:]))
        elif tail != "}":
            raise _NotChunkable
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _NotChunkable from exc
    yield last


def _whole_events(path: Path, raw: bytes, meta: dict[str, Any]) -> Iterator[list[Any]]:
    """The plain parser: the whole document at once, with clear errors."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" at byte {exc.pos}" if isinstance(exc, json.JSONDecodeError) else ""
        raise BadInput(f"{path} is not valid JSON{where}: {getattr(exc, 'msg', exc)}",
                       error_id="bad-trace") from exc
    except RecursionError as exc:
        raise BadInput(f"{path}: JSON nested too deeply", error_id="bad-trace") from exc
    if isinstance(doc, list):
        yield doc
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise BadInput(f"{path} is JSON but not a Chrome trace (no traceEvents list)",
                       error_id="bad-trace")
    events = doc.pop("traceEvents")
    meta.update(doc)
    yield events


@contextmanager
def _gc_paused():
    """Building millions of small objects makes the cyclic GC rescan them again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Agg:
    """Per-name sums, the same fields as one key_averages() row."""

    __slots__ = ("calls", "self_cpu", "cpu_total", "self_dev", "dev_total", "cpu_mem",
                 "self_cpu_mem", "dev_mem", "self_dev_mem", "kind")

    def __init__(self, kind: str):
        self.calls = 0
        self.self_cpu = self.cpu_total = self.self_dev = self.dev_total = 0.0
        self.cpu_mem = self.self_cpu_mem = self.dev_mem = self.self_dev_mem = 0
        self.kind = kind


def profile_from_events(chunks: Iterable[list[Any]], meta: dict[str, Any],
                        shapes: bool = False) -> Profile:
    """Aggregate a trace's events, given as lists of events; ``meta`` holds the
    trace's other top-level fields once ``chunks`` is exhausted. With ``shapes``,
    also group operators by input shape (``ops_by_shape``), as
    ``key_averages(group_by_input_shape=True)`` does."""
    with _gc_paused():
        return _aggregate(chunks, meta, shapes)


_by_start, _by_end = itemgetter(0), itemgetter(1)

# Fields of a host record (a list, for speed): name, kind, parent record, time in
# children, self device time, total device time, memory [self cpu, total cpu,
# self device, total device] or None, end, duration, number of children, merged,
# input dims (with shapes=True).
_NAME, _KIND, _PARENT, _CHILD, _SDEV, _TDEV, _MEM, _END, _DUR, _NCHILD, _MERGED = range(11)


def _aggregate(chunks: Iterable[list[Any]], meta: dict[str, Any], shapes: bool) -> Profile:
    # (pid, tid) -> [(ts, end, name, cat, ext, corr, dur)]
    threads: dict[Any, list] = defaultdict(list)
    device: list[tuple] = []  # (name, dur, ext id, correlation, kind)
    memory: dict[Any, list] = defaultdict(list)  # (pid, tid) -> [(ts, bytes, device type)]
    int_ts = None
    host, dev_cats, dev_ann, num = HOST_CATS, DEVICE_CATS, DEVICE_ANNOTATION_CATS, (float, int)
    for events in chunks:
        for e in events:
            try:
                ph = e["ph"]
                if ph == "X":
                    cat, ts, dur, name = e["cat"], e["ts"], e["dur"], e["name"]
                elif ph == "i" and e["name"] == "[memory]":
                    args = e["args"]
                    ts, size = e["ts"], args["Bytes"]
                    if type(ts) not in num:
                        ts = float(ts)
                    memory[(e.get("pid"), e.get("tid"))].append(
                        (ts, int(size), int(args.get("Device Type") or 0)))
                    continue
                else:
                    continue
                if type(ts) not in num:
                    ts = float(ts)
                if type(dur) not in num:
                    dur = float(dur)
            except (KeyError, TypeError, ValueError):
                continue  # not an event we read (or a malformed one)
            if type(name) is not str:
                continue
            if int_ts is None:
                int_ts = type(ts) is int
            if dur < 0:
                dur = 0
            args = e.get("args")
            if cat in host:
                if args:
                    ext = args.get("External id")
                    if ext is None:
                        ext = args.get("external id")
                    corr = args.get("correlation")
                else:
                    ext = corr = None
                dims = None
                if shapes and args:
                    dims = args.get("Input Dims")
                    if dims is None:
                        dims = args.get("Input dims")
                threads[(e.get("pid"), e.get("tid"))].append(
                    (ts, ts + dur, name, cat, ext, corr, dur, dims))
            elif cat in dev_cats:
                ext = corr = None
                if args:
                    ext = args.get("External id")
                    if ext is None:
                        ext = args.get("external id")
                    corr = args.get("correlation")
                device.append((name, dur, ext, corr, KIND_KERNEL, ts))
            elif cat in dev_ann:
                device.append((name, dur, None, None, KIND_ANNOTATION, ts))
    # Kineto's nanosecond mode writes integer ns and says so; everything else is in us.
    scale = 1e-3 if meta.get("displayTimeUnit") == "ns" and int_ts else 1.0

    seen: dict[tuple[str, str], tuple] = {}
    comm_of: dict[str, int] = {}  # name -> 1 collective work, 2 collective call, 0 neither
    comm_work: list[tuple[float, float]] = []
    comm_calls: list[tuple[float, float]] = []
    by_ext: dict[Any, list] = {}  # External id -> host record, for device attribution
    correlation_rt: dict[Any, list] = {}  # correlation id -> runtime record
    records: list[list] = []
    steps = 0
    eps = _EPS / scale
    for key, evs in threads.items():
        # By start, and at equal starts the longer (enclosing) event first: two stable
        # sorts on plain keys are faster than one on built tuples.
        evs.sort(key=_by_end, reverse=True)
        evs.sort(key=_by_start)
        mems = sorted(memory.pop(key, []))
        mi, n_mems = 0, len(mems)
        next_mem = mems[0][0] if mems else None
        stack: list[list] = []
        first_of_thread = len(records)
        for ts, end, name, cat, ext, corr, dur, dims in evs:
            while next_mem is not None and next_mem < ts:
                _charge_memory(stack, mems[mi])
                mi += 1
                next_mem = mems[mi][0] if mi < n_mems else None
            while stack and stack[-1][_END] <= ts + eps:
                _pop(stack)
            parent = None
            if stack:
                if end <= stack[-1][_END] + eps:
                    parent = stack[-1]
                else:
                    while stack:  # overlapping but not nested: close what is open
                        _pop(stack)
            # What a (category, name) is, decided once: its kind, whether it is a
            # collective, whether it is a step, its name in the table, a runtime call.
            facts = seen.get((cat, name))
            if facts is None:
                c = 1 if _COMM_WORK.search(name) else 2 if _COMM_CALL.search(name) else 0
                comm_of[name] = c
                is_step = name.startswith("ProfilerStep#")
                facts = seen[(cat, name)] = (_kind(name, cat), c, is_step,
                                             "ProfilerStep*" if is_step else name,
                                             cat in RUNTIME_CATS)
            kind, c, is_step, shown, runtime = facts
            if c:
                (comm_work if c == 1 else comm_calls).append((ts, end))
            if is_step:
                steps += 1
            rec = [shown, kind, parent, 0.0, 0.0, 0.0, None, end, dur, 0, False, dims]
            records.append(rec)
            if parent is not None:
                parent[_CHILD] += dur
                parent[_NCHILD] += 1
            stack.append(rec)
            if runtime:
                if corr is not None:
                    correlation_rt[corr] = rec
            elif ext is not None:
                by_ext[ext] = rec
        while mi < n_mems:
            _charge_memory(stack, mems[mi])
            mi += 1
        while stack:
            _pop(stack)
        _merge_self_calls(records, first_of_thread)

    # Device time: to the operator that launched each kernel.
    kernel_aggs: dict[tuple[str, str], _Agg] = {}
    for name, dur, ext, corr, kind, _ in device:
        agg = kernel_aggs.get((name, kind))
        if agg is None:
            agg = kernel_aggs[(name, kind)] = _Agg(kind)
        agg.calls += 1
        agg.self_dev += dur
        agg.dev_total += dur
        if kind != KIND_KERNEL:
            continue
        owner = by_ext.get(ext) if ext is not None else None
        if owner is None and corr is not None:
            runtime = correlation_rt.get(corr)
            owner = runtime[_PARENT] if runtime is not None else None
        while owner is not None and owner[_MERGED]:
            owner = owner[_PARENT]  # merged into its parent
        if owner is not None:
            owner[_SDEV] += dur
            node = owner
            while node is not None:
                node[_TDEV] += dur
                node = node[_PARENT]

    aggs: dict[tuple[str, str], _Agg] = {}
    shape_aggs: dict[tuple[str, str, str], _Agg] = {}
    for name, kind, _, child, self_dev, dev_total, mem, _, dur, _, merged, dims in records:
        if merged:
            continue
        targets = [aggs.get((name, kind)) or aggs.setdefault((name, kind), _Agg(kind))]
        if shapes:
            key = (name, kind, _shape_key(dims))
            targets.append(shape_aggs.get(key) or shape_aggs.setdefault(key, _Agg(kind)))
        for agg in targets:
            agg.calls += 1
            agg.cpu_total += dur
            agg.self_cpu += dur - child if dur > child else 0.0
            agg.self_dev += self_dev
            agg.dev_total += dev_total
            if mem is not None:
                agg.self_cpu_mem += mem[0]
                agg.cpu_mem += mem[1]
                agg.self_dev_mem += mem[2]
                agg.dev_mem += mem[3]

    ops = [_to_op(name, a, scale) for (name, _), a in aggs.items()]
    ops += [_to_op(name, a, scale) for (name, _), a in kernel_aggs.items()]
    by_shape = []
    for (name, _, dims), a in shape_aggs.items():
        op = _to_op(name, a, scale)
        op.input_shapes = dims
        by_shape.append(op)
    self_cpu = sum(a.self_cpu for a in aggs.values()) * scale
    self_dev = sum(a.self_dev for (_, kind), a in kernel_aggs.items()
                   if kind == KIND_KERNEL) * scale
    props = meta.get("deviceProperties") or []
    has_kernels = any(d[4] == KIND_KERNEL for d in device)
    comm = _communication(comm_work or comm_calls, threads, comm_of, device, has_kernels)
    return Profile(device_type="cuda" if has_kernels else None,
                   comm_us=comm[0] * scale if comm else None,
                   comm_overlap_us=comm[1] * scale if comm else None,
                   self_cpu_us=self_cpu, self_device_us=self_dev, steps=steps, ops=ops,
                   ops_by_shape=by_shape,
                   device_name=(props[0].get("name") if props and isinstance(props[0], dict)
                                else None))


# Collectives: the work itself (gloo:/nccl: ranges on the host, NCCL kernels on the
# device), and as a fallback the c10d operators that enqueue it.
_COMM_WORK = re.compile(r"^(gloo|nccl|mpi|ucc|xccl):|^nccl\w*Kernel|^ncclDevKernel|^rccl", re.I)
_COMM_CALL = re.compile(r"^c10d::|^c10d_functional::|^_c10d_functional::|record_param_comms")


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
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


def _communication(host_comm: list[tuple[float, float]], threads: dict, comm_of: dict,
                   device: list, on_device: bool) -> tuple[float, float] | None:
    """(time in collectives, the part of it that overlaps computation), or None without any.

    Communication is the union of the collectives' intervals (``host_comm``: the
    gloo/nccl ranges on the host, else the c10d calls, plus NCCL kernels).
    Computation is the union of the other kernels on a GPU profile, or of the
    other operators on a CPU profile's threads.
    """
    comm, compute = list(host_comm), []
    if on_device:
        for name, dur, _, _, kind, ts in device:
            if kind == KIND_KERNEL:
                (comm if _COMM_WORK.search(name) else compute).append((ts, ts + dur))
    if not comm:
        return None
    if not on_device:
        compute = [(ts, end) for evs in threads.values() for ts, end, name, cat, *_ in evs
                   if cat in ("cpu_op", "Operator") and not comm_of.get(name)]
    comm_u, compute_u = _union(comm), _union(compute)
    return sum(b - a for a, b in comm_u), _overlap(comm_u, compute_u)


def _shape_key(dims: Any) -> str:
    """Input shapes as key_averages(group_by_input_shape=True) prints them: a list
    argument (a TensorList, whose trace entry is a list of shapes) shows as []."""
    if not isinstance(dims, list):
        return "[]"
    return str([[] if d and isinstance(d, list) and isinstance(d[0], list) else d
                for d in dims])


def _kind(name: str, cat: str) -> str:
    if cat in RUNTIME_CATS:
        return KIND_RUNTIME
    if cat == "user_annotation" and not name.startswith("enumerate(DataLoader)"):
        return KIND_ANNOTATION
    return classify(name)


def _merge_self_calls(records: list, start: int) -> None:
    """Fold an event into its parent when both have one name and it is the only child.

    This is what key_averages() does (EventList._remove_dup_nodes): an operator
    that dispatches to itself counts once. The parent keeps its duration; the
    child's children, memory and kernels become the parent's.
    """
    for rec in records[start:]:
        up = rec[_PARENT]
        while up is not None and up[_MERGED]:
            up = up[_PARENT]
        rec[_PARENT] = up
        if up is None or up[_NAME] != rec[_NAME] or up[_NCHILD] != 1:
            continue
        rec[_MERGED] = True
        up[_CHILD] = rec[_CHILD]  # the parent's children are now the child's children
        up[_NCHILD] = rec[_NCHILD]
        if rec[_MEM] is not None:
            mem = _mem(up)
            mem[0] += rec[_MEM][0]
            mem[2] += rec[_MEM][2]


def _mem(rec: list) -> list:
    if rec[_MEM] is None:
        rec[_MEM] = [0, 0, 0, 0]
    return rec[_MEM]


def _charge_memory(stack: list[list], mem: tuple) -> None:
    """An allocation (or free) belongs to the innermost open host event on its thread."""
    while stack and stack[-1][_END] <= mem[0]:
        _pop(stack)
    if not stack:
        return
    slot = 0 if mem[2] == 0 else 2
    m = _mem(stack[-1])
    m[slot] += mem[1]
    m[slot + 1] += mem[1]


def _pop(stack: list[list]) -> None:
    """Close the innermost event: its total memory counts in its parent's total."""
    rec = stack.pop()
    mem, parent = rec[_MEM], rec[_PARENT]
    if mem is not None and parent is not None:
        up = _mem(parent)
        up[1] += mem[1]
        up[3] += mem[3]


def _to_op(name: str, a: _Agg, scale: float) -> Op:
    return Op(name=name, calls=a.calls, self_cpu_us=a.self_cpu * scale,
              cpu_total_us=a.cpu_total * scale, self_device_us=a.self_dev * scale,
              device_total_us=a.dev_total * scale, cpu_mem_b=a.cpu_mem,
              self_cpu_mem_b=a.self_cpu_mem, device_mem_b=a.dev_mem,
              self_device_mem_b=a.self_dev_mem, kind=a.kind)


def is_trace(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"[")


def read_trace(path: Path, shapes: bool = False) -> Profile:
    """The Profile of one trace file; ``shapes`` also groups by input shape."""
    raw = _open(path)
    meta: dict[str, Any] = {}
    try:
        profile = profile_from_events(_chunked_events(raw, meta), meta, shapes)
    except _NotChunkable:
        meta = {}
        profile = profile_from_events(_whole_events(path, raw, meta), meta, shapes)
    info = meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    profile.label = f"rank {rank}" if rank is not None else path.name
    if not profile.ops:
        raise BadInput(f"{path}: a Chrome trace without profiler events (no cpu_op, "
                       "runtime or kernel events)", error_id="bad-trace")
    return profile


TRACE_SUFFIXES = (".json", ".json.gz")


def read_trace_folder(folder: Path) -> list[Profile]:
    """One profile per trace file in a folder (per-rank traces), ordered by rank or name."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                   and p.name != "run.json")
    if not files:
        raise BadInput(f"{folder}: no run.json and no Chrome traces (*.json, *.json.gz)",
                       error_id="bad-input")
    profiles = [read_trace(p) for p in files]

    def order(p: Profile):
        label = p.label
        return (0, int(label.split()[1])) if label.startswith("rank ") else (1, label)
    return sorted(profiles, key=order)
