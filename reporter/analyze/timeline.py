"""The timeline analyses of a trace (profile_of): host events nested on each thread,
kernels attributed to the operator that launched them, memory charged to the innermost
operator, summed per name (and shape) into a Profile, with the step breakdown, the
critical path, compile facts, FLOP costs and the calls read one by one
(reporter.analyze.timeline_costs). They read the timeline record a reader fills
(reporter.model.timeline) and no decoder."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Iterable

from ..model import device as devices
from ..model.profile import KIND_DEVICE_ANNOTATION, KIND_KERNEL, KIND_RUNTIME, Op, Profile
from ..model.timeline import Event, MemoryEvent, Timeline
from .breakdown import step_breakdown
from .compiled import GRAPH_LAUNCHES
from .critical_path import critical_path
from .timeline_costs import (
    _comm_in_steps,
    _communication,
    _compiled_facts,
    _cost_of,
    _costs,
    _facts,
    _op_calls,
)
from .timeline_records import (
    Record,
    _AGG,
    _Agg,
    _CHILD,
    _COST,
    _END,
    _EPS,
    _EVENT,
    _INSIDE,
    _MEM,
    _MERGED,
    _NCHILD,
    _PARENT,
    _PHASE,
    _SDEV,
    _TDEV,
    _by_dur,
    _by_ts,
)


def profile_of(timeline: Timeline, shapes: bool = False, costs: bool = False) -> Profile:
    """A trace's Profile from its timeline record: with ``shapes``, operators grouped by
    input shape too (``ops_by_shape``); with ``costs``, the FLOPs and bytes of the
    operators reporter.analyze.flops models (each call's, from the inputs the record holds,
    or the cost the reader computed from them: ``args.computed``)."""
    threads, device, device_ann = timeline.threads, timeline.device, timeline.device_annotations
    py_modules, memory, meta = timeline.modules, dict(timeline.memory), timeline.meta
    scale = timeline.scale

    facts_of: dict[str, dict[str, tuple[Any, ...]]] = defaultdict(dict)  # cat -> name -> facts
    aggs: dict[tuple[str, str], _Agg] = {}
    comm_of: dict[str, int] = {}  # name -> 1 collective work, 2 collective call, 0 neither
    comm_work: list[tuple[float, float]] = []
    comm_calls: list[tuple[float, float]] = []
    # Device attribution needs every operator's ids; a trace without kernels does not.
    by_ext: dict[Any, Record] | None = {} if device else None  # External id -> host record
    correlation_rt: dict[Any, Record] = {}  # correlation id -> runtime record
    records: list[Record] = []
    costed: list[Record] = []  # records with a cost
    # the host's allocations and frees, with their operators
    host_allocs: list[tuple[Any, ...]] = []
    steps = 0
    step_ranges: list[tuple[float, float]] = []
    eps = _EPS / scale
    for key, evs in threads.items():
        # By start, and at equal starts the longer (enclosing) event first. Kineto
        # writes a thread's events nearly in order, which one sort on the start
        # time (floats) takes in linear time; only when starts tie, which integer
        # microseconds make likely, sort again with the duration as second key.
        evs.sort(key=_by_ts)
        starts = list(map(_by_ts, evs))
        if len(set(starts)) != len(starts):
            evs.sort(key=_by_dur, reverse=True)
            evs.sort(key=_by_ts)
        del starts
        mems = sorted(memory.pop(key, []))
        mi, n_mems = 0, len(mems)
        next_mem = mems[0][0] if mems else None
        stack: list[Record] = []
        first_of_thread = len(records)
        for e in evs:
            ts, dur = e.ts, e.dur
            if dur < 0:
                dur = 0
            end = ts + dur
            while next_mem is not None and next_mem < ts:
                _charge_memory(stack, mems[mi], host_allocs)
                mi += 1
                next_mem = mems[mi][0] if mi < n_mems else None
            while stack and stack[-1][_END] <= ts + eps:  # _pop, inlined in the hot loop
                top = stack.pop()
                if top[_MEM] is not None:
                    _closed(top)
            parent = None
            if stack:
                if end <= stack[-1][_END] + eps:
                    parent = stack[-1]
                else:
                    while stack:  # overlapping but not nested: close what is open
                        _pop(stack)
            # What a (category, name) is, decided once: its row, whether it is a
            # collective, whether it is a step, whether it is a runtime call.
            names = facts_of[e.cat]
            facts = names.get(e.name)
            if facts is None:
                facts = names[e.name] = _facts(e.name, e.cat, aggs, comm_of)
            agg, c, is_step, runtime, formula, phase = facts
            if c:
                (comm_work if c == 1 else comm_calls).append((ts, end))
            if is_step:
                steps += 1
                step_ranges.append((ts, end))
            if parent is None:
                rec = [agg, None, 0.0, 0.0, 0.0, None, end, dur, 0, False, e, None, False,
                       phase]
            else:
                rec = [agg, parent, 0.0, 0.0, 0.0, None, end, dur, 0, False, e, None,
                       parent[_INSIDE] or bool(parent[_COST]), phase or parent[_PHASE]]
            records.append(rec)
            if costs and formula and e.args is not None and _cost_of(rec, e.args):
                costed.append(rec)
            if parent is not None:
                parent[_CHILD] += dur
                parent[_NCHILD] += 1
            stack.append(rec)
            if by_ext is not None and e.args is not None:
                if runtime:
                    if e.args.corr is not None:
                        correlation_rt[e.args.corr] = rec
                else:
                    ext = e.args.ext if e.args.ext is not None else e.args.ext_old
                    if ext is not None:
                        by_ext[ext] = rec
        while mi < n_mems:
            _charge_memory(stack, mems[mi], host_allocs)
            mi += 1
        while stack:
            _pop(stack)
        _merge_self_calls(records, first_of_thread)

    # Device time: to the operator that launched each kernel.
    kernel_aggs: dict[tuple[str, str], _Agg] = {}
    graph_kernels, graph_us = 0, 0.0
    for kind, evs in ((KIND_KERNEL, device), (KIND_DEVICE_ANNOTATION, device_ann)):
        for e in evs:
            dur = e.dur if e.dur > 0 else 0
            agg = kernel_aggs.get((e.name, kind))
            if agg is None:
                agg = kernel_aggs[(e.name, kind)] = _Agg(e.name, kind)
            agg.calls += 1
            agg.self_dev += dur
            agg.dev_total += dur
            if kind == KIND_KERNEL and by_ext is not None:
                _attribute(e, dur, by_ext, correlation_rt)
                if e.args is not None and e.args.corr is not None:
                    rt = correlation_rt.get(e.args.corr)
                    if rt is not None and rt[_AGG].name in GRAPH_LAUNCHES:
                        graph_kernels += 1  # replayed by a CUDA graph: one launch for all
                        graph_us += dur

    for agg, _, child, self_dev, dev_total, mem, _, dur, _, merged, *_ in records:
        if not merged:  # _Agg.add, inlined: once per record
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
    by_shape = _by_shape(records, scale) if shapes else []
    cost_rows, not_modelled, recorded = (_costs(costed, aggs, bool(device), scale) if costs
                                         else ([], {}, False))

    ops = [_to_op(a, scale) for a in aggs.values() if a.calls]
    ops += [_to_op(a, scale) for a in kernel_aggs.values()]
    self_cpu = sum(a.self_cpu for a in aggs.values()) * scale
    self_dev = sum(a.self_dev for (_, kind), a in kernel_aggs.items()
                   if kind == KIND_KERNEL) * scale
    props = meta.get("deviceProperties")
    props = props if isinstance(props, list) else []
    comm = _communication(comm_work or comm_calls, threads, comm_of, device)
    launches = _launches(device, {corr: rec[_EVENT].ts + max(rec[_EVENT].dur, 0)
                                  for corr, rec in correlation_rt.items()})
    breakdown = step_breakdown(threads, step_ranges, device, scale, py_modules, launches,
                               device_name=_device_name(props),
                               device_mem_b=_device_memory(props))
    if breakdown is not None:
        breakdown.critical = critical_path(threads, device, scale)
        comm = _comm_in_steps(breakdown, comm, scale)
    compiled = _compiled_facts(records, aggs, device, correlation_rt, scale, step_ranges)
    op_calls = _op_calls(records, aggs, step_ranges, bool(device))
    runtime = (o.name for o in ops if o.kind == KIND_RUNTIME)
    return Profile(device_type=devices.of("cuda", _device_name(props), runtime_calls=runtime).kind
                   if device else None,
                   comm_us=comm[0] * scale if comm else None,
                   comm_overlap_us=comm[1] * scale if comm else None,
                   self_cpu_us=self_cpu, self_device_us=self_dev, steps=steps, ops=ops,
                   ops_by_shape=by_shape, breakdown=breakdown,
                   device_name=_device_name(props),
                   device_mem_capacity_b=_device_memory(props),
                   costs=cost_rows, not_modelled_us=not_modelled, shapes_recorded=recorded,
                   cost_basis=("device" if device else "cpu") if recorded else None,
                   graph_kernels=graph_kernels, graph_kernel_us=graph_us * scale,
                   compiled=compiled, peak_live_b=_peak_live(host_allocs),
                   op_calls=op_calls)


def _launches(device: list[Event], call_end: dict[Any, float]) -> list[tuple[float, float]]:
    """Each piece of device work's start and its launch on the host (the end of its runtime
    call: until the call returns the host is still launching it; under the profiler a
    launch call takes about as long as the launch-to-start delay, 12 us on an H200, and
    T5's launch-bound step read 12.5% of its idle time as work queued behind a dependency
    when counted from the call's start): which idle time had work queued. Work whose
    launch the trace does not hold but whose correlation id is below every launch the
    trace holds was launched before the trace began (ids grow with each call): minus
    infinity, queued from the trace's start. Other work without its launch: infinity (not
    known to be queued). ``call_end``: each correlation id's runtime call's end."""
    never, before = float("inf"), float("-inf")
    ids = [c for c in call_end if type(c) is int]
    first = min(ids) if ids else None
    out = []
    for e in device:
        corr = e.args.corr if e.args is not None else None
        end = call_end.get(corr) if corr is not None else None
        if end is not None:
            out.append((e.ts, end))
        elif first is not None and type(corr) is int and corr < first:
            out.append((e.ts, before))
        else:
            out.append((e.ts, never))
    return out


def _device_name(props: list[Any]) -> str | None:
    """The device's name; where a HIP build names it generically ("AMD Radeon Graphics"),
    with its compute capability and compute units, which tell the parts apart
    (reporter.analyze.peaks: "AMD Radeon Graphics (compute 9.0, 104 CUs)")."""
    first = props[0] if props and isinstance(props[0], dict) else {}
    name = first.get("name")
    if not isinstance(name, str):
        return None
    facts = [first.get(k) for k in ("computeMajor", "computeMinor", "numSms")]
    if (devices.of("cuda", name).vendor == "AMD" and not re.search(r"MI\d", name)
            and all(type(v) is int and 0 <= v < 100_000 for v in facts)):
        return f"{name} (compute {facts[0]}.{facts[1]}, {facts[2]} CUs)"
    return name


def _device_memory(props: list[Any]) -> int | None:
    mem = props[0].get("totalGlobalMem") if props and isinstance(props[0], dict) else None
    return mem if type(mem) is int and mem > 0 else None


def _attribute(kernel: Event, dur: float, by_ext: dict[Any, Record],
               correlation_rt: dict[Any, Record]) -> None:
    """A kernel's time to the operator that launched it (External id), else to the
    caller of the runtime call with its correlation id; and to that operator's callers."""
    args = kernel.args
    if args is None:
        return
    ext = args.ext if args.ext is not None else args.ext_old
    owner = by_ext.get(ext) if ext is not None else None
    if owner is None and args.corr is not None:
        runtime = correlation_rt.get(args.corr)
        owner = runtime[_PARENT] if runtime is not None else None
    while owner is not None and owner[_MERGED]:
        owner = owner[_PARENT]  # merged into its parent
    if owner is not None:
        owner[_SDEV] += dur
        node = owner
        while node is not None:
            node[_TDEV] += dur
            node = node[_PARENT]


def _by_shape(records: list[Record], scale: float) -> list[Op]:
    """Operators grouped by name and input shapes."""
    shape_aggs: dict[tuple[str, str, str], _Agg] = {}
    for agg, _, child, self_dev, dev_total, mem, _, dur, _, merged, e, *_ in records:
        if merged:
            continue
        args = e.args
        dims = None
        if args is not None:
            dims = args.dims if args.dims is not None else args.dims_old
        key = (agg.name, agg.kind, _shape_key(dims))
        into = shape_aggs.get(key)
        if into is None:
            into = shape_aggs[key] = _Agg(agg.name, agg.kind)
        into.add(dur, child, self_dev, dev_total, mem)
    ops = []
    for (_, _, dims), a in shape_aggs.items():
        op = _to_op(a, scale)
        op.input_shapes = dims
        ops.append(op)
    return ops


def _shape_key(dims: Any) -> str:
    """Input shapes as key_averages(group_by_input_shape=True) prints them: a list
    argument (a TensorList, whose trace entry is a list of shapes) shows as []."""
    if not isinstance(dims, list):
        return "[]"
    return str([[] if d and isinstance(d, list) and isinstance(d[0], list) else d
                for d in dims])


shape_key = _shape_key  # the key of Profile.ops_by_shape rows, for the what-ifs


def _merge_self_calls(records: list[Record], start: int) -> None:
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
        if up is None or up[_NCHILD] != 1 or up[_AGG].name != rec[_AGG].name:
            continue
        rec[_MERGED] = True
        up[_CHILD] = rec[_CHILD]  # the parent's children are now the child's children
        up[_NCHILD] = rec[_NCHILD]
        if rec[_MEM] is not None:
            mem = _mem(up)
            mem[0] += rec[_MEM][0]
            mem[2] += rec[_MEM][2]


def _mem(rec: Record) -> list[int]:
    if rec[_MEM] is None:
        rec[_MEM] = [0, 0, 0, 0]
    mem: list[int] = rec[_MEM]
    return mem


# Operators that only hand memory out: what they allocate is their caller's (an
# operator's output, allocated by the aten::empty it calls).
_ALLOCATORS = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
               "aten::new_empty_strided", "aten::resize_"}


def _charge_memory(stack: list[Record], mem: MemoryEvent, host: list[tuple[Any, ...]]) -> None:
    """An allocation (or free) belongs to the innermost open host event on its thread.
    The host's (device type 0) with an address and the allocator's total also go into
    ``host`` with the operator they are of (``_peak_live``)."""
    while stack and stack[-1][_END] <= mem[0]:
        _pop(stack)
    if mem[2] == 0 and mem[3] >= 0 and mem[4] >= 0:
        of = None
        if stack and mem[1] > 0:
            rec = stack[-1]
            while rec[_AGG].name in _ALLOCATORS and rec[_PARENT] is not None:
                rec = rec[_PARENT]
            of = rec[_AGG].name
        host.append((mem[0], mem[1], mem[3], mem[4], of))
    if not stack:
        return
    slot = 0 if mem[2] == 0 else 2
    m = _mem(stack[-1])
    m[slot] += mem[1]
    m[slot + 1] += mem[1]


def _peak_live(host: list[tuple[Any, ...]]) -> dict[str, int]:
    """The host memory live at the peak of what the allocator held in the trace (its
    "Total Allocated"), by the operator that allocated it (an allocator's to its caller):
    what a fix that no longer makes those tensors takes off the peak. Allocations made
    before the trace began are not in it (parameters, optimizer state)."""
    if not host:
        return {}
    host.sort(key=lambda m: m[0])
    peak = max(range(len(host)), key=lambda i: host[i][3])
    return _live((nbytes, addr, of) for _, nbytes, addr, _, of in host[:peak + 1])


def _live(events: Iterable[tuple[int, int, str | None]]) -> dict[str, int]:
    """The bytes live after ``events`` (each the bytes allocated, or freed where not
    positive, the address, the operator it is of or None), by operator."""
    live: dict[int, tuple[int, str | None]] = {}
    for nbytes, addr, of in events:
        if nbytes > 0:
            live[addr] = (nbytes, of)
        else:
            live.pop(addr, None)
    by_op: dict[str, int] = defaultdict(int)
    for nbytes, of in live.values():
        if of is not None:
            by_op[of] += nbytes
    return dict(by_op)


def _pop(stack: list[Record]) -> None:
    """Close the innermost event."""
    rec = stack.pop()
    if rec[_MEM] is not None:
        _closed(rec)


def _closed(rec: Record) -> None:
    """A closed event's total memory counts in its parent's total."""
    parent = rec[_PARENT]
    if parent is not None:
        up, mem = _mem(parent), rec[_MEM]
        up[1] += mem[1]
        up[3] += mem[3]


def _to_op(a: _Agg, scale: float) -> Op:
    return Op(name=a.name, calls=a.calls, self_cpu_us=a.self_cpu * scale,
              cpu_total_us=a.cpu_total * scale, self_device_us=a.self_dev * scale,
              device_total_us=a.dev_total * scale, cpu_mem_b=a.cpu_mem,
              self_cpu_mem_b=a.self_cpu_mem, device_mem_b=a.dev_mem,
              self_device_mem_b=a.self_dev_mem, kind=a.kind)
