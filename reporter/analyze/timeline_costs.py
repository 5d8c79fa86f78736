"""The timeline analyses of a trace's operators and their phases (reporter.analyze.timeline):
FLOP and byte costs (_costs), compile facts (_compiled_facts, _facts), the operators
whose calls grow (_op_calls) and the communication (_communication)."""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import defaultdict
from typing import Any, Iterable, Iterator

from ..model import vendors
from ..model.profile import KIND_ANNOTATION, KIND_OP, KIND_RUNTIME, Breakdown, OpCalls, classify
from ..model.timeline import OP_CATS, RUNTIME_CATS, Event
from .breakdown import MODULE_MARK, overlap, union
from .compiled import (
    BACKWARD,
    CACHE_LOOKUP,
    FORWARD,
    GENERATED,
    GRAPH_LAUNCHES,
    REGION,
    UNNAMED_TRITON,
)
from .flops import MATRIX, cost, modelled
from .timeline_records import (
    Record,
    _AGG,
    _Agg,
    _COST,
    _DUR,
    _END,
    _EVENT,
    _INSIDE,
    _MERGED,
    _PARENT,
    _PHASE,
    _TDEV,
)


def _cost_of(rec: Record, args: Any) -> bool:
    """A modelled operator's cost. Of nested modelled operators, one carries the cost: a
    matrix product, convolution or attention keeps it from the helpers it calls (the
    copy of the bias in aten::addmm); otherwise the innermost one does (aten::linear
    leaves it to its aten::addmm, aten::softmax to aten::_softmax)."""
    if hasattr(args, "computed"):
        c = args.computed  # the reader computed it from the call's inputs
    else:
        dims = args.dims if args.dims is not None else args.dims_old
        c = cost(rec[_AGG].name, dims, args.types, args.concrete)
    if c is None:
        return False
    above = []
    up = rec[_PARENT]
    while up is not None and (up[_COST] or up[_INSIDE]):  # none above has a cost otherwise
        if up[_COST]:
            if c.family != MATRIX and up[_COST].family == MATRIX:
                return False  # a helper inside a matrix operator: its time is the operator's
            above.append(up)
        up = up[_PARENT]
    rec[_COST] = c
    for up in above:
        up[_COST] = False
    return True


# What an operator runs under, from the innermost name around it that tells: the
# autograd engine, an optimizer, the runner's marks. "unmarked" is the forward of a trace
# without marks, and whatever else runs outside them.
PHASES = ("unmarked", "backward", "optimizer", "forward", "data", "loss")
_BACKWARD = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$|^backward$")
_OPTIMIZER = re.compile(r"^Optimizer\.step#|^optimizer_step$")
_DATA = re.compile(r"^enumerate\(DataLoader\)|^data_loading$|^input_copy$")


def _phase_of(name: str) -> int:
    if _BACKWARD.search(name):
        return 1
    if _OPTIMIZER.search(name):
        return 2
    return 3 if name == "forward" else 4 if _DATA.search(name) else 5 if name == "loss" else 0


# At most this many not-modelled operators are kept, the ones that take the most time.
NOT_MODELLED_ROWS = 15


def _costs(costed: list[Record], aggs: dict[tuple[str, str], _Agg], on_device: bool, scale: float
           ) -> tuple[list[dict[str, Any]], dict[str, float], bool]:
    """Modelled operators' FLOPs, bytes and time summed per (name, dtype, family, phase),
    time being device time on a GPU trace and CPU time (inclusive) on a CPU one; the
    self time of the operators that have no formula; whether the trace recorded input
    types (some call has a cost)."""
    def calls() -> Iterator[tuple[_Agg, Any, int, float]]:
        for rec in costed:
            if rec[_COST]:
                owner = rec
                while owner[_MERGED]:
                    owner = owner[_PARENT]
                yield (rec[_AGG], rec[_COST], rec[_PHASE],
                       owner[_TDEV] if on_device else owner[_DUR])
    return _cost_rows(calls(), bool(costed), aggs, on_device, scale)


def _cost_rows(calls: Iterable[tuple[_Agg, Any, int, float]], recorded: bool,
               aggs: dict[tuple[str, str], _Agg], on_device: bool, scale: float
               ) -> tuple[list[dict[str, Any]], dict[str, float], bool]:
    """_costs' rows from the calls that carry a cost, in order: each its row, cost, phase
    and time (its own, or that of the call it is folded into); ``recorded``: whether any
    call had a cost."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for agg, c, phase, t in calls:
        if t <= 0:
            continue  # a CPU-side operator of a GPU trace
        key = (agg, c, phase)  # calls with one cost repeat every step
        g = groups.get(key)
        if g is None:
            groups[key] = [1, t]
        else:
            g[0] += 1
            g[1] += t
    merged: dict[tuple[Any, ...], list[Any]] = {}
    for (agg, c, phase), (calls, t) in groups.items():
        name_key = (agg.name, c.dtype, c.family, PHASES[phase])
        g = merged.get(name_key)
        if g is None:
            g = merged[name_key] = [0, 0.0, 0.0, 0.0]
        g[0] += calls
        g[1] += c.flops * calls
        g[2] += c.bytes * calls
        g[3] += t
    unmodelled = {a.name: a.self_dev if on_device else a.self_cpu for a in aggs.values()
                  if a.kind == KIND_OP and not modelled(a.name)}
    rows = [{"name": n, "dtype": d, "family": f, "phase": p, "calls": g[0], "flops": g[1],
             "bytes": g[2], "time_us": g[3] * scale} for (n, d, f, p), g in merged.items()]
    top = sorted(((n, t) for n, t in unmodelled.items() if t > 0),
                 key=lambda kv: -kv[1])[:NOT_MODELLED_ROWS]
    return rows, {n: t * scale for n, t in top}, recorded


def compiled_related(name: str) -> bool:
    """Whether _compiled_facts reads the records of an operator of this name (a compiled
    region, a compiled graph's call or backward, the cache lookup, a generated kernel);
    it reads no other record, so that it may be given these only, in order."""
    return (name in (FORWARD, BACKWARD, CACHE_LOOKUP) or REGION.match(name) is not None
            or name.startswith("## Call CompiledFxGraph") or GENERATED.match(name) is not None
            or UNNAMED_TRITON.match(name) is not None)


def _compiled_facts(records: Iterable[Record], aggs: dict[tuple[str, str], _Agg],
                    device: list[Event], correlation_rt: Any, scale: float,
                    step_ranges: list[tuple[float, float]]) -> dict[str, Any]:
    """What torch.compile's events say beyond their sums (reporter.analyze.compiled):

    - ``kernels``: each kernel Inductor generated, per compiled region it ran in
      (``"F/C"`` of the ``Torch-Compiled Region`` around it; a kernel of a compiled
      backward, under ``CompiledFunctionBackward``, belongs to the region whose
      ``CompiledFunction`` has the same autograd sequence number; None where no region
      encloses it, as in torch 2.0 traces): name, region, calls, time (device time of
      the kernels on a GPU, the C++ kernel's range on the CPU);
    - ``breaks``: how often a compiled region ran inside another one: after a graph
      break the frame runs the code Dynamo could not compile eagerly, then calls the
      frame Dynamo resumes in, whose region nests in its own; ``break_us`` the host time
      from the end of the outer region's last graph call to the nested region (the eager
      code of the break, Dynamo's guard checks included), ``break_lookup_us`` the guard
      checks in it, ``break_pairs`` the regions, outer and nested;
    - ``compiled_us``: host time in compiled code: the outermost regions (or, in torch 2.0
      traces, compiled functions) and compiled backwards, less the breaks' time (a region
      nested in another is counted once, the eager code of a break not at all);
      ``compiled_device_us``: the device time of the work launched from inside a
      compiled graph's call (``CompiledFunction``, ``## Call CompiledFxGraph ... ##``,
      ``CompiledFunctionBackward``); ``step_us``: ``compiled_us`` per profiled step
      (by the step each range starts in), when the trace marks steps.

    Empty when the trace holds no compiled region or compiled function."""
    labels: dict[int, str] = {}
    fwd = bwd = lookup = None
    for (name, _), a in aggs.items():
        m = REGION.match(name)
        if m is not None:
            labels[id(a)] = f"{m[1]}/{m[2]}"
        elif name == FORWARD:
            fwd = a
        elif name == BACKWARD:
            bwd = a
        elif name == CACHE_LOOKUP:
            lookup = a
    if not labels and fwd is None and bwd is None:
        return {}
    seq_region: dict[Any, str | None] = {}

    def region(rec: Record | None) -> str | None:
        while rec is not None:
            a = rec[_AGG]
            label = labels.get(id(a))
            if label is not None:
                return label
            if a is bwd:
                args = rec[_EVENT].args
                return seq_region.get(args.seq) if args is not None else None
            rec = rec[_PARENT]
        return None

    # A graph break: the frame runs its graph, then the code Dynamo could not compile
    # eagerly, then calls the frame it resumes in, whose region nests in the first one.
    # The break's time: from the end of the outer region's last graph call (its start,
    # when it ran none) to the start of the nested region.
    def outer_of(rec: Record) -> Record | None:
        node = rec[_PARENT]
        while node is not None:
            if id(node[_AGG]) in labels:
                found: Record = node
                return found
            node = node[_PARENT]
        return None

    graph_work = {id(a) for (name, _), a in aggs.items()
                  if name == FORWARD or name.startswith("## Call CompiledFxGraph")}
    last_end: dict[int, float] = {}
    checks: dict[int, list[tuple[float, float]]] = defaultdict(list)
    breaks, break_us, break_lookup_us = 0, 0.0, 0.0
    pairs: dict[str, int] = defaultdict(int)
    compiled_ids = set(labels) | {id(a) for a in (fwd, bwd) if a is not None}
    outermost_us = 0.0
    spans = sorted(step_ranges)
    starts = [lo for lo, _ in spans]
    per_step = [0.0] * len(spans)

    def step_of(t: float) -> int | None:
        i = bisect_right(starts, t) - 1
        return i if i >= 0 and t < spans[i][1] else None
    for rec in records:
        a = rec[_AGG]
        if a is fwd and rec[_EVENT].args is not None and rec[_EVENT].args.seq is not None:
            seq_region[rec[_EVENT].args.seq] = region(rec[_PARENT])
        if id(a) in compiled_ids:
            node = rec[_PARENT]
            while node is not None and id(node[_AGG]) not in compiled_ids:
                node = node[_PARENT]
            if node is None:
                outermost_us += rec[_DUR]
                i = step_of(rec[_EVENT].ts)
                if i is not None:
                    per_step[i] += rec[_DUR]
        is_region = id(a) in labels
        if not (is_region or id(a) in graph_work or a is lookup):
            continue
        outer = outer_of(rec)
        if outer is None:
            continue
        key, ts = id(outer), rec[_EVENT].ts
        if a is lookup:
            checks[key].append((ts, rec[_DUR]))
        elif not is_region:
            last_end[key] = max(last_end.get(key, 0.0), rec[_END])
        else:
            since = max(last_end.get(key, outer[_EVENT].ts), outer[_EVENT].ts)
            breaks += 1
            break_us += max(0.0, ts - since)
            i = step_of(ts)
            if i is not None:
                per_step[i] -= max(0.0, ts - since)
            break_lookup_us += sum(d for t, d in checks.pop(key, []) if since <= t < ts)
            pairs[f"{labels[id(outer[_AGG])]} → {labels[id(a)]}"] += 1
            last_end[key] = rec[_END]
    kernels: dict[tuple[str, str | None], list[float]] = {}

    def generated(name: str) -> bool:
        return GENERATED.match(name) is not None or UNNAMED_TRITON.match(name) is not None

    if device:
        for e in device:
            if e.cat in ("kernel", "Kernel") and generated(e.name):
                rt = (correlation_rt.get(e.args.corr) if e.args is not None
                      and e.args.corr is not None else None)
                k = kernels.setdefault((e.name, region(rt)), [0, 0.0])
                k[0] += 1
                k[1] += max(0.0, e.dur)
    else:
        names = {id(a) for (name, kind), a in aggs.items()
                 if kind == KIND_OP and generated(name)}
        for rec in records:
            if id(rec[_AGG]) in names:
                k = kernels.setdefault((rec[_AGG].name, region(rec)), [0, 0.0])
                k[0] += 1
                k[1] += rec[_DUR]
    in_graph = graph_work | ({id(bwd)} if bwd is not None else set())
    device_us = 0.0
    # how that work was launched: replayed by a CUDA graph, copies and sets launched
    # one by one, kernels launched one by one (the graphs' generated kernels are in
    # the first: the parts add up to compiled_device_us)
    split = {"graphs": 0.0, "copies": 0.0, "kernels": 0.0}
    for e in device:
        rt = (correlation_rt.get(e.args.corr) if e.args is not None
              and e.args.corr is not None else None)
        node = rt
        while node is not None and id(node[_AGG]) not in in_graph:
            node = node[_PARENT]
        if node is not None and rt is not None:
            dur = max(0.0, e.dur)
            device_us += dur
            split["graphs" if rt[_AGG].name in GRAPH_LAUNCHES else
                  "kernels" if e.cat in ("kernel", "Kernel") else "copies"] += dur
    return {"kernels": [{"name": n, "region": r, "calls": int(c), "time_us": t * scale}
                        for (n, r), (c, t) in kernels.items()],
            "compiled_us": max(0.0, outermost_us - break_us) * scale,
            "compiled_device_us": device_us * scale,
            "compiled_device_split_us": {k: us * scale for k, us in split.items()},
            "step_us": [max(0.0, us) * scale for us in per_step],
            "breaks": breaks, "break_us": break_us * scale,
            "break_lookup_us": break_lookup_us * scale, "break_pairs": dict(pairs)}


def _facts(name: str, cat: str, aggs: dict[tuple[str, str], _Agg],
           comm_of: dict[str, int]) -> tuple[Any, ...]:
    """What every event of one (category, name) shares: its row (_Agg), whether it
    is a collective (1 the work, 2 the call that enqueues it), a step, a runtime call,
    whether reporter.analyze.flops has a formula for it, the phase it starts (_phase_of)."""
    c = comm_of[name] = 1 if _COMM_WORK.search(name) else 2 if _COMM_CALL.search(name) else 0
    is_step = name.startswith("ProfilerStep#")
    shown = "ProfilerStep*" if is_step else name
    kind = _kind(name, cat)
    agg = aggs.get((shown, kind))
    if agg is None:
        agg = aggs[(shown, kind)] = _Agg(shown, kind)
    return (agg, c, is_step, cat in RUNTIME_CATS, cat in OP_CATS and modelled(name),
            _phase_of(name))


# Operators holding this share of their basis's self time or more (the device's on a GPU
# trace, the CPU's otherwise) are read call by call (_op_calls), at most OP_CALLS_ROWS.
OP_CALLS_SHARE = 0.25
OP_CALLS_ROWS = 3
# Calls in a step whose inputs grow, call by call, from one size to at least GROWTH times
# it, the sizes following the call's index with a correlation of GROWTH_FIT or more, in
# GROWTH_CALLS calls or more: each call works on all that came before (a quadratic
# pattern: torch.cat([out, piece]) in a loop, a sum over a growing prefix).
GROWTH = 4.0
GROWTH_FIT = 0.95
GROWTH_CALLS = 8


def _elements(dims: Any) -> int | None:
    """The elements of a call's tensor inputs from its recorded dims (a tensor's list of
    sizes, a tensor list's list of them; scalars are empty lists); None without any."""
    if not isinstance(dims, list):
        return None
    if dims and all(type(d) is int for d in dims):
        return int(math.prod(max(d, 0) for d in dims))
    found = [n for n in (_elements(d) for d in dims if isinstance(d, list) and d)
             if n is not None]
    return sum(found) if found else None


def _grows(sizes: list[int]) -> bool:
    """Whether ``sizes``, in call order, grow roughly linearly from the first to the last
    (GROWTH, GROWTH_FIT, GROWTH_CALLS)."""
    n = len(sizes)
    if n < GROWTH_CALLS or sizes[0] <= 0 or sizes[-1] < GROWTH * sizes[0]:
        return False
    mean_i, mean_s = (n - 1) / 2, sum(sizes) / n
    cov = sum((i - mean_i) * (s - mean_s) for i, s in enumerate(sizes))
    var_i = sum((i - mean_i) ** 2 for i in range(n))
    var_s = sum((s - mean_s) ** 2 for s in sizes)
    return var_s > 0 and cov / math.sqrt(var_i * var_s) >= GROWTH_FIT


def _op_call_rows(aggs: dict[tuple[str, str], _Agg], on_device: bool) -> list[_Agg]:
    """The operators whose calls _op_calls reads: those that hold OP_CALLS_SHARE of the
    self time or more, at most OP_CALLS_ROWS, the most first."""
    ops = [a for (_, kind), a in aggs.items() if kind == KIND_OP and a.calls]
    def time(a: _Agg) -> float:
        return a.self_dev if on_device else a.self_cpu
    total = sum(time(a) for a in ops)
    return sorted((a for a in ops if total > 0 and time(a) >= OP_CALLS_SHARE * total),
                  key=time, reverse=True)[:OP_CALLS_ROWS]


def _op_calls(records: Iterable[Record], aggs: dict[tuple[str, str], _Agg],
              step_ranges: list[tuple[float, float]],
              on_device: bool) -> dict[str, OpCalls]:
    """The calls of the operators that hold OP_CALLS_SHARE of the self time or more, read
    within the profiled steps (reporter.model.profile.OpCalls); none without steps.
    ``records``: profile_of's, or those of the operators _op_call_rows names (in order)."""
    if not step_ranges:
        return {}
    tops = _op_call_rows(aggs, on_device)
    if not tops:
        return {}
    steps = sorted(step_ranges)
    starts = [s for s, _ in steps]
    by_step: dict[Any, dict[int, list[Record]]] = {a: defaultdict(list) for a in tops}
    for rec in records:
        per = by_step.get(rec[_AGG])
        if per is None or rec[_MERGED]:
            continue
        ts = rec[_EVENT].ts
        i = bisect_right(starts, ts) - 1
        if i >= 0 and ts <= steps[i][1]:
            per[i].append(rec)
    out = {}
    for agg, per in by_step.items():
        if not per:
            continue
        i = max(per, key=lambda k: (len(per[k]), -k))  # the step with the most calls
        calls = sorted(per[i], key=lambda r: r[_EVENT].ts)
        sizes = [_elements(_dims(r[_EVENT].args)) for r in calls]
        known = [n for n in sizes if n is not None]
        modules: dict[str, int] = defaultdict(int)
        for r in calls:
            up = r[_PARENT]
            while up is not None and not up[_AGG].name.startswith(MODULE_MARK):
                up = up[_PARENT]
            if up is not None:
                modules[up[_AGG].name[len(MODULE_MARK):]] += 1
        module = max(modules, key=lambda m: modules[m]) if modules else None
        out[agg.name] = OpCalls(
            calls_per_step=sum(len(v) for v in per.values()) / len(steps),
            step_calls=len(calls),
            first_elements=known[0] if len(known) == len(sizes) else 0,
            last_elements=known[-1] if len(known) == len(sizes) else 0,
            growing=len(known) == len(sizes) and _grows(known), module=module)
    return out


def _dims(args: Any) -> Any:
    if args is None:
        return None
    dims = getattr(args, "dims", None)
    return dims if dims is not None else getattr(args, "dims_old", None)


# the host's ranges of the process group's backends ("nccl:all_reduce"), or the device's
# collective kernels (the vendors' table: NCCL's, RCCL's)
_COMM_WORK = re.compile(r"^(gloo|nccl|mpi|ucc|xccl):|"
                        + vendors.pattern("collective_kernels").pattern, re.I)
_COMM_CALL = re.compile(r"^c10d::|^c10d_functional::|^_c10d_functional::|record_param_comms")


def _communication(host_comm: list[tuple[float, float]], threads: dict[Any, list[Event]],
                   comm_of: dict[str, int],
                   device: list[Event]) -> tuple[float, float] | None:
    """(time in collectives, the part of it that overlaps computation), or None without any.

    Communication is the union of the collectives' intervals: the NCCL (RCCL) kernels
    where the device ran any, else ``host_comm`` (the gloo/nccl ranges on the host, else
    the c10d calls). The host's ``nccl:*`` ranges only enqueue the kernels: counted
    beside them, they made a collective look longer and more overlapped than it ran.
    Computation is the union of the other kernels on a GPU profile (not copies or
    sets), or of the other operators on a CPU profile's threads.
    """
    comm: list[Any] = []
    compute: list[Any] = []
    for e in device:
        span = (e.ts, e.ts + max(e.dur, 0))
        if _COMM_WORK.search(e.name):
            comm.append(span)
        elif e.cat in ("kernel", "Kernel"):  # copies and sets are no computation
            compute.append(span)
    if not comm:
        comm = list(host_comm)
    if not comm:
        return None
    if not device:
        compute = [(e.ts, e.ts + max(e.dur, 0)) for evs in threads.values() for e in evs
                   if e.cat in ("cpu_op", "Operator") and not comm_of.get(e.name)]
    comm_u, compute_u = union(comm), union(compute)
    return sum(b - a for a, b in comm_u), overlap(comm_u, compute_u)


def _comm_in_steps(b: Breakdown, comm: tuple[float, float] | None, scale: float
                   ) -> tuple[float, float] | None:
    """The communication of a GPU trace with profiled steps, as the step breakdown measured
    it inside the steps (its exposed communication plus the part compute kernels hide), in
    the trace's units: one figure for the finding, the reading and the ranks (trace 07's
    whole trace gave 17.5% of the steps' time where the steps held 15.3%). Else ``comm``
    as it is."""
    if comm is None or not b.marked or "communication" not in b.device_us:
        return comm
    hidden = sum(b.device_notes_us.get("comm_overlapped", []))
    exposed = sum(b.device_us["communication"])
    if hidden + exposed <= 0:
        return comm  # collectives on the host only (gloo): no device figure
    return (hidden + exposed) / scale, hidden / scale


def _kind(name: str, cat: str) -> str:
    if cat in RUNTIME_CATS:
        return KIND_RUNTIME
    if cat == "user_annotation" and not name.startswith("enumerate(DataLoader)"):
        return KIND_ANNOTATION
    return classify(name)
