"""The timeline analyses of a trace read as columns (reporter.model.columns): the Profile
reporter.analyze.timeline.profile_of makes of the object record (without ``shapes``), to
the last bit, in memory bounded by the columns (#68). reporter.ingest.traces.read_trace
reads every trace so but the runner's own (read with their calls' inputs, as objects).

Each host thread's events are sorted and nested as profile_of nests them (a Python loop
over a window of the columns at a time, so that only a window's objects live at once:
the stack, its epsilon, overlapping events closing what is open, memory charged to the
innermost open event), and the rest is arrays: the self calls folded into their parent,
kernels attributed to the operator that launched them, and the sums per name with
``bincount``, which adds in the records' order as profile_of's loop does. The other
analyses are profile_of's own functions, given what they read: the step breakdown, its
critical path and communication the device work as decoded and the host events they read
as objects (_read_events: marks, steps, waits, runtime calls and each thread's bounds, a
small part of a thread); the compile facts and the calls read one by one the records of
the operators they read (_Records); the FLOP costs each costed call's row, cost, phase and
time (_cost_calls, profile_of's _cost_of over bytearrays).
"""

from __future__ import annotations

from array import array
from typing import Any, Iterator

import numpy as np

from ..model import device as devices
from ..model.columns import NONE, Columns, HostArgs, HostEvent
from ..model.profile import KIND_DEVICE_ANNOTATION, KIND_KERNEL, KIND_RUNTIME, Profile
from ..model.timeline import OP_CATS, Event
from .breakdown import _SYNC_CALL, MODULE_MARK, phase_of, step_breakdown
from .compiled import GRAPH_LAUNCHES
from .critical_path import WAITS, critical_path
from .timeline import _ALLOCATORS, _device_memory, _device_name, _launches, _live, _to_op
from .flops import MATRIX
from .timeline_costs import (
    _comm_in_steps,
    _communication,
    _compiled_facts,
    _cost_rows,
    _facts,
    _op_call_rows,
    _op_calls,
    compiled_related,
)
from .timeline_records import _EPS, _Agg

_WINDOW = 1 << 16  # events turned into Python objects at a time


def profile_of_columns(c: Columns, costs: bool = False) -> Profile:
    """A trace's Profile from its columns: profile_of's without ``shapes`` (no by-shape
    rows), to the bit; with ``costs``, the FLOPs and bytes of the modelled operators (their
    calls' costs, which the reader computed: Columns.costs)."""
    scale = c.scale
    h = c.host
    n = len(h["ts"])
    # Threads in the order of their first host event; each thread's events by start, the
    # longer first, then in the trace's order (profile_of's sorts).
    first = np.unique(h["thread"], return_index=True)
    rank = np.zeros(len(c.threads) + 1, np.int32)
    rank[first[0][np.argsort(first[1])]] = np.arange(len(first[0]), dtype=np.int32)
    order = np.lexsort((-h["dur"], h["ts"], rank[h["thread"]])).astype(np.int32)
    thread = h["thread"][order]
    bounds = np.flatnonzero(np.diff(thread)) + 1
    firsts_of = thread[np.r_[0, bounds]] if n else thread
    del thread, rank

    # What each (category, name) is, decided once, in the records' order (profile_of's
    # facts, so that its rows come in the same order).
    aggs: dict[tuple[str, str], _Agg] = {}
    comm_of: dict[str, int] = {}
    pair = h["cat"][order].astype(np.int64) * len(c.names) + h["name"][order]
    keys, firsts, which = np.unique(pair, return_index=True, return_inverse=True)
    agg_list: list[_Agg] = []
    of_key = np.zeros(len(keys), np.int32)
    runtime_key = np.zeros(len(keys), bool)
    step_key = np.zeros(len(keys), bool)
    comm_key = np.zeros(len(keys), np.int8)  # 1 collective work, 2 a collective's call
    phase_key = np.zeros(len(keys), np.int8)  # the phase it starts (timeline_costs.PHASES)
    index_of: dict[int, int] = {}
    for k in np.argsort(firsts, kind="stable").tolist():
        cat, name = c.cats[int(keys[k]) // len(c.names)], c.names[int(keys[k]) % len(c.names)]
        agg, comm, is_step, runtime, _, phase = _facts(name, cat, aggs, comm_of)
        if id(agg) not in index_of:
            index_of[id(agg)] = len(agg_list)
            agg_list.append(agg)
        of_key[k], runtime_key[k], step_key[k] = index_of[id(agg)], runtime, is_step
        comm_key[k], phase_key[k] = comm, phase
    del pair, keys, firsts
    agg_of = of_key[which]  # each record's row
    runtime = runtime_key[which]
    is_step = step_key[which]
    steps = int(is_step.sum())
    comm = comm_key[which]
    phase = phase_key[which]
    del which
    shown = [a.name for a in agg_list]
    name_ids = {name: i for i, name in enumerate(dict.fromkeys(shown))}
    name_of = np.array([name_ids[s] for s in shown] or [0], np.int32)[agg_of]  # shown name

    # Memory events by thread, each thread's sorted as profile_of sorts its tuples.
    m = c.memory
    morder = np.lexsort((m["total"], m["addr"], m["device_type"], m["nbytes"], m["ts"],
                         m["thread"]))
    mthread = m["thread"][morder]

    parent = np.full(n, -1, np.int32)  # the enclosing record as nested (before folding)
    charged = array("q")  # each memory event's record, -1 where none is open
    segments: list[tuple[int, int]] = []  # each host thread's memory events in morder
    eps = _EPS / scale
    for a, b, key in zip([0, *bounds.tolist()], [*bounds.tolist(), n], firsts_of.tolist()):
        lo, hi = np.searchsorted(mthread, key), np.searchsorted(mthread, key, side="right")
        segments.append((lo, hi))
        mts = m["ts"][morder[lo:hi]].tolist()
        mi, n_mems = 0, len(mts)
        next_mem = mts[0] if mts else None
        stack_end: list[float] = []
        stack_at: list[int] = []
        for w0 in range(a, b, _WINDOW):
            w1 = min(b, w0 + _WINDOW)
            out = [-1] * (w1 - w0)
            window = order[w0:w1]
            t0, d0 = h["ts"][window], h["dur"][window]
            starts, ends = t0.tolist(), (t0 + np.where(d0 < 0, 0.0, d0)).tolist()
            del window, t0, d0
            for j, (t, e) in enumerate(zip(starts, ends)):
                while next_mem is not None and next_mem < t:
                    while stack_end and stack_end[-1] <= next_mem:
                        stack_end.pop()
                        stack_at.pop()
                    charged.append(stack_at[-1] if stack_at else -1)
                    mi += 1
                    next_mem = mts[mi] if mi < n_mems else None
                while stack_end and stack_end[-1] <= t + eps:
                    stack_end.pop()
                    stack_at.pop()
                if stack_end:
                    if e <= stack_end[-1] + eps:
                        out[j] = stack_at[-1]
                    else:  # overlapping but not nested: close what is open
                        stack_end.clear()
                        stack_at.clear()
                stack_end.append(e)
                stack_at.append(w0 + j)
            parent[w0:w1] = out
        for t in mts[mi:]:
            while stack_end and stack_end[-1] <= t:
                stack_end.pop()
                stack_at.pop()
            charged.append(stack_at[-1] if stack_at else -1)
    del mthread, firsts_of

    at = np.frombuffer(charged, np.int64) if len(charged) else np.empty(0, np.int64)
    # the memory events in the order charged: each host thread's, in the threads' order
    rows = np.concatenate([morder[lo:hi] for lo, hi in segments] or [morder[:0]])
    peak_live = _peak_live_of(m, rows, at, parent, agg_of, shown)

    dur = h["dur"][order]
    dur[dur < 0] = 0.0
    # the ids kernels are found by: each External id's last operator, each correlation
    # id's last runtime call (profile_of's dicts, later records overwriting earlier ones)
    if len(c.device["ts"]):
        ids = h["ext"][order]
        ids[runtime] = NONE
        launch_of = _last_of(ids)
        ids = h["corr"][order]
        ids[~runtime] = NONE
        call_of = _last_of(ids)
        del ids

    # Fold an event into its parent when both have one name and it is its only child
    # (profile_of's _merge_self_calls: the parent keeps its time; the child's children,
    # memory and kernels become the parent's).
    above = parent.astype(np.int64) + 1  # 0: none
    nchild = np.bincount(above, minlength=n + 1)[1:].astype(np.int32)
    child = np.bincount(above, weights=dur, minlength=n + 1)[1:].astype(np.float64, copy=False)
    del above
    has = parent >= 0
    up_of = np.where(has, parent, 0)
    candidates = np.flatnonzero(has & (nchild[up_of] == 1) & (name_of[up_of] == name_of))
    del up_of
    merged = np.zeros(n, bool)
    final = parent.copy()
    for i in candidates.tolist():
        up = int(final[i])
        if merged[up]:
            up = int(final[up])
        final[i] = up
        if nchild[up] != 1 or name_of[up] != name_of[i]:
            continue
        merged[i] = True
        child[up] = child[i]
        nchild[up] = nchild[i]
    folded = has & merged[np.where(has, parent, 0)]
    final[folded] = final[parent[folded]]
    del folded, has, nchild, name_of, candidates
    # Memory: an event's bytes to its record's row (self: the row it was folded into),
    # and to the rows of its record and every caller not folded (total: each record's
    # total is its own and its callees', profile_of's _closed).
    k = len(agg_list)
    mem = np.zeros((4, k), np.int64)  # self host, total host, self device, total device
    some = np.flatnonzero(at >= 0)
    node: np.ndarray = at[some]
    slot: np.ndarray = np.where(m["device_type"][rows[some]] == 0, 0, 2)
    amount: np.ndarray = m["nbytes"][rows[some]]
    del at, rows, some
    np.add.at(mem, (slot, agg_of[np.where(merged[node], final[node], node)]), amount)
    while len(node):
        kept = ~merged[node]
        np.add.at(mem, (slot[kept] + 1, agg_of[node[kept]]), amount[kept])
        node = parent[node]
        going = node >= 0
        node, slot, amount = node[going], slot[going], amount[going]

    # Device time: to the operator that launched each kernel (its External id), else to
    # the caller of the runtime call with the kernel's correlation id; and to its callers.
    d = c.device
    kdur = np.where(d["dur"] > 0, d["dur"], 0.0)
    graph_kernels, graph_us = 0, 0.0
    owners: np.ndarray = np.empty(0, np.int64)  # the records kernels ran under, sorted
    self_dev: np.ndarray = np.empty(0)
    total_dev: np.ndarray = np.empty(0)
    if len(kdur) and n:  # without host events no kernel has an operator
        owner: np.ndarray = _find(launch_of, d["ext"])
        call = _find(call_of, d["corr"])
        del launch_of
        by_call = (owner < 0) & (call >= 0)
        owner[by_call] = final[call[by_call]]
        owner = np.where((owner >= 0) & merged[np.maximum(owner, 0)],
                         final[np.maximum(owner, 0)], owner)
        mine = np.flatnonzero(owner >= 0)
        # each kernel's record and every caller's, with the kernel: summed per record in
        # the kernels' order, as profile_of adds them
        nodes: list[np.ndarray] = []
        kernels: list[np.ndarray] = []
        own: list[np.ndarray] = []
        node = owner[mine]
        top = True
        while len(node):
            nodes.append(node)
            kernels.append(mine)
            own.append(np.full(len(node), top))
            top = False
            node = final[node]
            going = node >= 0
            node, mine = node[going], mine[going]
        if nodes:
            node, kernel, is_own = (np.concatenate(x) for x in (nodes, kernels, own))
            by_kernel = np.argsort(kernel, kind="stable")
            node, kernel, is_own = node[by_kernel], kernel[by_kernel], is_own[by_kernel]
            owners, which = np.unique(node, return_inverse=True)
            weights = kdur[kernel]
            self_dev = np.bincount(which[is_own], weights=weights[is_own],
                                   minlength=len(owners))
            total_dev = np.bincount(which, weights=weights, minlength=len(owners))
        graph_names = np.array([a.name in GRAPH_LAUNCHES for a in agg_list] or [False])
        replayed = (call >= 0) & graph_names[agg_of[np.maximum(call, 0)]]
        graph_kernels = int(replayed.sum())
        graph_us = float(np.bincount(np.zeros(graph_kernels, np.int64),
                                     weights=kdur[replayed], minlength=1)[0])

    # The sums per row, over the records not folded into their parent, in their order
    # (a record without kernels adds nothing to a row's device time: left out).
    # A folded record adds 0.0: a sum that starts at 0.0 is the same with it.
    calls = np.bincount(agg_of, weights=~merged, minlength=k).astype(np.int64)
    child -= dur
    np.negative(child, out=child)  # dur - child
    child[(child <= 0) | merged] = 0.0
    dur[merged] = 0.0
    sums = {"cpu_total": (agg_of, dur), "self_cpu": (agg_of, child)}
    mine = ~merged[owners]
    sums["self_dev"] = (agg_of[owners[mine]], self_dev[mine])
    sums["dev_total"] = (agg_of[owners[mine]], total_dev[mine])
    for field, (row, weights) in sums.items():
        for agg, value in zip(agg_list, np.bincount(row, weights=weights,
                                                    minlength=k).tolist()):
            setattr(agg, field, value)
    for field, values in zip(("self_cpu_mem", "cpu_mem", "self_dev_mem", "dev_mem"),
                             mem.tolist()):
        for agg, value in zip(agg_list, values):
            setattr(agg, field, value)
    for agg, value in zip(agg_list, calls.tolist()):
        agg.calls = value
    del sums, dur, child

    kernel_aggs: dict[tuple[str, str], _Agg] = {}
    names, rows = np.unique(d["name"], return_inverse=True)
    rows = rows.reshape(-1)
    if len(rows):
        firsts = np.full(len(names), len(rows))
        np.minimum.at(firsts, rows, np.arange(len(rows)))
        time = np.bincount(rows, weights=kdur, minlength=len(names)).tolist()
        count = np.bincount(rows, minlength=len(names)).tolist()
        for r in np.argsort(firsts, kind="stable").tolist():
            name = c.names[int(names[r])]
            agg = kernel_aggs[(name, KIND_KERNEL)] = _Agg(name, KIND_KERNEL)
            agg.calls, agg.self_dev, agg.dev_total = count[r], time[r], time[r]
    for e in c.device_annotations:  # few: as profile_of adds them
        mark = e.dur if e.dur > 0 else 0
        agg = kernel_aggs.get((e.name, KIND_DEVICE_ANNOTATION))
        if agg is None:
            agg = kernel_aggs[(e.name, KIND_DEVICE_ANNOTATION)] = _Agg(e.name,
                                                                       KIND_DEVICE_ANNOTATION)
        agg.calls += 1
        agg.self_dev += mark
        agg.dev_total += mark

    ops = [_to_op(a, scale) for a in aggs.values() if a.calls]
    ops += [_to_op(a, scale) for a in kernel_aggs.values()]
    props = c.meta.get("deviceProperties")
    props = props if isinstance(props, list) else []
    names_rt = (o.name for o in ops if o.kind == KIND_RUNTIME)

    # the steps and collectives as profile_of lists them, in the records' order
    step_ranges, comm_work, comm_calls = (
        list(zip(*_times(c, order[np.flatnonzero(mask)]))) for mask in (is_step, comm == 1,
                                                                         comm == 2))

    # FLOP costs, compile facts and the calls read one by one: profile_of's own functions,
    # on the records they read (_Records makes them).
    records = _Records(c, order, agg_list, agg_of, final, merged, (owners, self_dev, total_dev))
    cost_rows, not_modelled, recorded = (
        _cost_rows(*_cost_calls(c, order, parent, phase, records, bool(len(kdur))), aggs,
                   bool(len(kdur)), scale) if costs else ([], {}, False))
    del parent, phase
    tops = {id(a) for a in _op_call_rows(aggs, bool(len(kdur)))} if step_ranges else set()
    op_calls = _op_calls([records(i) for i in _where(agg_of, agg_list,
                                                     lambda a: id(a) in tops)],
                         aggs, step_ranges, bool(len(kdur)))
    compiled: dict[str, Any] = {}
    if any(compiled_related(a.name) for a in agg_list):
        related = [records(i) for i in _where(agg_of, agg_list,
                                              lambda a: compiled_related(a.name))]
        calls_of: Any = _Calls(c, call_of, records) if len(kdur) else {}
        compiled = _compiled_facts(related, aggs, c.device_events, calls_of, scale,
                                   step_ranges)
    del records, final, merged, agg_of

    # The step breakdown, its critical path and communication: profile_of's calls, on the
    # steps and collectives in the records' order and the host events they read, as
    # objects (_read_events).
    device = c.device_events
    call_end: dict[Any, Any] = {}
    if len(kdur):
        codes, calls_at = call_of
        call_end = dict(zip((c.value(k) for k in codes.tolist()),
                            _times(c, order[calls_at])[1]))
    threads = _read_events(c, order, bounds, runtime,
                           compute=bool(comm_work or comm_calls) and not device)
    del order, bounds, runtime, is_step, comm
    communication = _communication(comm_work or comm_calls, threads, comm_of, device)
    breakdown = step_breakdown(threads, step_ranges, device, scale, c.modules,
                               _launches(device, call_end), device_name=_device_name(props),
                               device_mem_b=_device_memory(props))
    del call_end
    if breakdown is not None:
        breakdown.critical = critical_path(threads, device, scale)
        communication = _comm_in_steps(breakdown, communication, scale)
    return Profile(
        costs=cost_rows, not_modelled_us=not_modelled, shapes_recorded=recorded,
        cost_basis=("device" if len(kdur) else "cpu") if recorded else None,
        compiled=compiled, op_calls=op_calls,
        comm_us=communication[0] * scale if communication else None,
        comm_overlap_us=communication[1] * scale if communication else None,
        breakdown=breakdown,
        device_type=devices.of("cuda", _device_name(props), runtime_calls=names_rt).kind
        if len(kdur) else None,
        self_cpu_us=sum(a.self_cpu for a in aggs.values()) * scale,
        self_device_us=sum(a.self_dev for (_, kind), a in kernel_aggs.items()
                           if kind == KIND_KERNEL) * scale,
        steps=steps, ops=ops, device_name=_device_name(props),
        device_mem_capacity_b=_device_memory(props), graph_kernels=graph_kernels,
        graph_kernel_us=graph_us * scale, peak_live_b=peak_live)


class _Records:
    """profile_of's records (reporter.analyze.timeline_records) of the operators an
    analysis reads, made when first asked for, each with its callers' (its parent: the
    one it is folded into, else its caller not folded); the device time comes from
    ``device`` (the records kernels ran under, sorted, their self and total device time).
    The cost fields (_COST, _INSIDE, _PHASE) are left empty: the analyses given records
    (compile facts, calls read one by one) do not read them; costs are _cost_calls'."""

    def __init__(self, c: Columns, order: np.ndarray, agg_list: list[_Agg],
                 agg_of: np.ndarray, final: np.ndarray, merged: np.ndarray,
                 device: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.c, self.order, self.agg_list, self.agg_of = c, order, agg_list, agg_of
        self.final, self.merged, self.device = final, merged, device
        self.made: dict[int, list[Any]] = {}

    def __call__(self, i: int) -> list[Any]:
        made = self.made
        found = made.get(i)
        if found is not None:
            return found
        chain = []
        while i >= 0 and i not in made:
            chain.append(i)
            i = int(self.final[i])
        parent = made[i] if i >= 0 else None
        c, h = self.c, self.c.host
        owners, self_dev, total_dev = self.device
        for j in reversed(chain):
            row = int(self.order[j])
            ts, dur = h["ts"][row].item(), h["dur"][row].item()
            ext, corr, seq = (c.value(int(h[k][row])) for k in ("ext", "corr", "seq"))
            dims = c.dims.get(row)
            thread = c.threads[int(h["thread"][row])]
            event = HostEvent(c.cats[int(h["cat"][row])], c.names[int(h["name"][row])],
                              thread[0], thread[1], ts, dur,
                              None if ext is None and corr is None and seq is None
                              and dims is None else HostArgs(ext, corr, seq, dims))
            k = int(np.searchsorted(owners, j))
            on = k < len(owners) and owners[k] == j
            clipped = dur if dur > 0 else 0.0
            rec = [self.agg_list[self.agg_of[j]], parent, 0.0,
                   self_dev[k].item() if on else 0.0, total_dev[k].item() if on else 0.0,
                   None, ts + clipped, clipped, 0, bool(self.merged[j]), event,
                   None, False, 0]
            made[j] = parent = rec
        return parent  # type: ignore[return-value]


def _cost_calls(c: Columns, order: np.ndarray, parent: np.ndarray, phase: np.ndarray,
                records: _Records, on_device: bool) -> tuple[Iterator[tuple[Any, ...]], bool]:
    """_cost_rows' calls, and whether any call had a cost.

    profile_of's _cost_of, call by call in the records' order over the modelled
    operators' calls and their callers (as nested, before folding: what it climbs), each
    caller marked inside a modelled operator or not and given its phase as profile_of does
    when it makes the record; then each call left with a cost: its row, cost, phase and
    the time of the call it is folded into (device time on a GPU trace, else its
    duration)."""
    if not len(c.cost_rows):
        return iter(()), False
    n = len(order)
    at = np.empty(n, np.int64)
    at[order] = np.arange(n)
    calls = at[c.cost_rows]
    del at
    by_call = np.argsort(calls, kind="stable")
    calls = calls[by_call]
    found = [c.costs[k] for k in by_call.tolist()]
    # 0 no cost, 1 a cost, 2 modelled but an operator inside carries it (profile_of's False)
    state, matrix, inside, phases, reached = (bytearray(n) for _ in range(5))
    for i in calls.tolist():
        while i >= 0 and not reached[i]:
            reached[i] = 1
            i = int(parent[i])
    cost_at = dict(zip(calls.tolist(), found))
    del calls, found
    kept = []
    for x in np.flatnonzero(np.frombuffer(reached, np.uint8)).tolist():
        p = int(parent[x])
        if p >= 0:
            inside[x] = 1 if inside[p] or state[p] == 1 else 0
            phases[x] = phase[x] or phases[p]
        else:
            phases[x] = phase[x]
        cost = cost_at.get(x)
        if cost is None:
            continue
        above, up, helper = [], p, False
        while up >= 0 and (state[up] == 1 or inside[up]):
            if state[up] == 1:
                if cost.family != MATRIX and matrix[up]:
                    helper = True  # a helper inside a matrix operator: its time is the operator's
                    break
                above.append(up)
            up = int(parent[up])
        if helper:
            continue
        state[x], matrix[x] = 1, cost.family == MATRIX
        for up in above:
            state[up] = 2
        kept.append(x)
    had = bool(kept)
    costed = np.array([x for x in kept if state[x] == 1], np.int64)
    owner = np.where(records.merged[costed], records.final[costed], costed)
    if on_device:
        owners, _, total_dev = records.device
        k = np.minimum(np.searchsorted(owners, owner), max(len(owners) - 1, 0))
        on = (owners[k] == owner) if len(owners) else np.zeros(len(owner), bool)
        t = np.where(on, total_dev[k] if len(owners) else 0.0, 0.0)
    else:
        dur = c.host["dur"][order[owner]]
        t = np.where(dur > 0, dur, 0.0)
    rows = records.agg_list
    return ((rows[a], cost_at[x], phases[x], time) for x, a, time in
            zip(costed.tolist(), records.agg_of[costed].tolist(), t.tolist())), had


def _where(agg_of: np.ndarray, agg_list: list[_Agg], which: Any) -> list[int]:
    """The records, in order, of the rows ``which`` holds true of."""
    rows = np.array([bool(which(a)) for a in agg_list] or [False])
    return np.flatnonzero(rows[agg_of]).tolist()


class _Calls:
    """profile_of's correlation id -> runtime call record (its .get), made when asked."""

    def __init__(self, c: Columns, call_of: tuple[np.ndarray, np.ndarray],
                 records: _Records) -> None:
        self.c, self.keys, self.at, self.records = c, call_of[0], call_of[1], records

    def get(self, corr: Any, default: Any = None) -> Any:
        code = self.c.code(corr)
        k = int(np.searchsorted(self.keys, code))
        if code == NONE or k >= len(self.keys) or self.keys[k] != code:
            return default
        return self.records(int(self.at[k]))


def _times(c: Columns, rows: np.ndarray) -> tuple[list[float], list[float]]:
    """The starts and ends of the host events at ``rows`` (an end: the start plus the
    duration, 0 if negative)."""
    ts, dur = c.host["ts"][rows], c.host["dur"][rows]
    return ts.tolist(), (ts + np.where(dur < 0, 0.0, dur)).tolist()


def _read_events(c: Columns, order: np.ndarray, bounds: np.ndarray, runtime: np.ndarray,
                 compute: bool) -> dict[Any, list[Event]]:
    """Each host thread's events that the step breakdown, the critical path, the module
    times and communication read, as decoded events, in the records' order: what they
    would find in the thread's whole list. Their marks, waits and synchronisations (by
    name: phase_of, WAITS, _SYNC_CALL), steps, runtime calls, the thread's first event and
    the one that ends last (where the trace has no steps, they bound it); with module
    marks, the marks and every event with a sequence number; with ``compute`` (the
    operators a CPU trace's collectives overlap), the operators."""
    h = c.host
    names = h["name"][order]
    kept_name = np.zeros(len(c.names) + 1, bool)
    marks = [n.startswith(MODULE_MARK) for n in c.names]
    with_modules = any(marks) or bool(c.modules)
    for i, name in enumerate(c.names):
        kept_name[i] = bool(phase_of(name) or _SYNC_CALL.search(name) or WAITS.search(name)
                            or name.startswith("ProfilerStep#") or (with_modules and marks[i]))
    keep = kept_name[names] | runtime
    del names
    if with_modules:
        keep |= h["seq"][order] != NONE
    if compute:
        ops = np.zeros(len(c.cats) + 1, bool)
        ops[[i for i, cat in enumerate(c.cats) if cat in OP_CATS]] = True
        keep |= ops[h["cat"][order]]
    if len(order):
        starts = np.r_[0, bounds]
        keep[starts] = True
        end = h["dur"][order]
        np.maximum(end, 0.0, out=end)
        end += h["ts"][order]
        last = np.maximum.reduceat(end, starts)
        for a, b, top in zip(starts.tolist(), [*bounds.tolist(), len(order)], last.tolist()):
            keep[a + int(np.argmax(end[a:b] == top))] = True
        del end
    threads: dict[Any, list[Event]] = {}
    value = c.value
    at = np.flatnonzero(keep)
    del keep
    for w in range(0, len(at), _WINDOW):
        rows = order[at[w:w + _WINDOW]]
        cols = [h[k][rows].tolist() for k in ("name", "cat", "thread", "ext", "corr", "seq")]
        for name, cat, thread, ext, corr, seq, t, d in zip(*cols, h["ts"][rows].tolist(),
                                                            h["dur"][rows].tolist()):
            key = c.threads[thread]
            events = threads.get(key)
            if events is None:
                events = threads[key] = []
            args = (None if ext == NONE and corr == NONE and seq == NONE
                    else HostArgs(value(ext), value(corr), value(seq)))
            events.append(HostEvent(c.cats[cat], c.names[name], key[0], key[1], t, d, args))
    return threads


def _peak_live_of(m: dict[str, np.ndarray], rows: np.ndarray, at: np.ndarray,
                  parent: np.ndarray, agg_of: np.ndarray, shown: list[str]) -> dict[str, int]:
    """profile_of's _peak_live from the memory events (``rows``, in the order they were
    charged, each to its record ``at``): the host memory live at the allocator's peak by
    the operator that allocated it (an allocator's to its caller)."""
    keep = np.flatnonzero((m["device_type"][rows] == 0) & (m["addr"][rows] >= 0)
                          & (m["total"][rows] >= 0))
    if not len(keep):
        return {}
    rows, at = rows[keep], at[keep]
    of = np.full(len(rows), -1, np.int32)  # the row of its operator, -1: none
    allocs = np.flatnonzero((at >= 0) & (m["nbytes"][rows] > 0))
    for i, rec in zip(allocs.tolist(), at[allocs].tolist()):
        while shown[agg_of[rec]] in _ALLOCATORS and parent[rec] >= 0:
            rec = int(parent[rec])
        of[i] = agg_of[rec]
    by_time = np.argsort(m["ts"][rows], kind="stable")
    rows, of = rows[by_time], of[by_time]
    peak = int(np.argmax(m["total"][rows]))  # the first of the highest

    def events() -> Iterator[tuple[int, int, str | None]]:
        for w in range(0, peak + 1, _WINDOW):  # a window's objects at a time
            window = rows[w:min(peak + 1, w + _WINDOW)]
            for nbytes, addr, op in zip(m["nbytes"][window].tolist(),
                                        m["addr"][window].tolist(),
                                        of[w:w + len(window)].tolist()):
                yield nbytes, addr, shown[op] if op >= 0 else None
    return _live(events())


def _last_of(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each id (NONE left out) and the last record that holds it, sorted by id."""
    at = np.flatnonzero(ids != NONE)
    by_id = np.argsort(ids[at], kind="stable")
    at = at[by_id]
    keys = ids[at]
    last = np.flatnonzero(np.r_[keys[1:] != keys[:-1], True]) if len(keys) else at
    return keys[last], at[last]


def _find(table: tuple[np.ndarray, np.ndarray], ids: np.ndarray) -> np.ndarray:
    """The record each of ``ids`` names in ``table`` (_last_of), -1 where none."""
    keys, records = table
    if not len(keys):
        return np.full(len(ids), -1, np.int64)
    pos = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
    found = (keys[pos] == ids) & (ids != NONE)
    return np.where(found, records[pos], -1).astype(np.int64)


