"""The per-operator sums of a trace read as columns (reporter.model.columns): what
reporter.analyze.timeline.profile_of computes for ``key_averages()``'s table, the same
numbers to the last bit, in memory bounded by the columns (#68).

Each host thread's events are sorted and nested as profile_of nests them (a Python loop
over a window of the columns at a time, so that only a window's objects live at once:
the stack, its epsilon, overlapping events closing what is open, memory charged to the
innermost open event), and the rest is arrays: the self calls folded into their parent,
kernels attributed to the operator that launched them, and the sums per name with
``bincount``, which adds in the records' order as profile_of's loop does.

It computes the operator table, the totals, the steps, the CUDA graphs' kernels and the
host memory live at the peak; not yet the timeline's other analyses (the step breakdown,
the critical path, communication, FLOP costs, compile facts, the calls read one by one,
the shapes), which read the object record.
"""

from __future__ import annotations


from array import array
from collections import defaultdict

import numpy as np

from ..model import device as devices
from ..model.columns import NONE, Columns
from ..model.profile import KIND_DEVICE_ANNOTATION, KIND_KERNEL, KIND_RUNTIME, Profile
from .compiled import GRAPH_LAUNCHES
from .timeline import _ALLOCATORS, _device_memory, _device_name, _to_op
from .timeline_costs import _facts
from .timeline_records import _EPS, _Agg

_WINDOW = 1 << 16  # events turned into Python objects at a time


def sums_of(c: Columns) -> Profile:
    """The Profile's operator table and totals from a trace's columns (profile_of's, to
    the bit); the other timeline analyses are left empty."""
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
    index_of: dict[int, int] = {}
    for k in np.argsort(firsts, kind="stable").tolist():
        cat, name = c.cats[int(keys[k]) // len(c.names)], c.names[int(keys[k]) % len(c.names)]
        agg, _, is_step, runtime, _, _ = _facts(name, cat, aggs, comm_of)
        if id(agg) not in index_of:
            index_of[id(agg)] = len(agg_list)
            agg_list.append(agg)
        of_key[k], runtime_key[k], step_key[k] = index_of[id(agg)], runtime, is_step
    del pair, keys, firsts
    agg_of = of_key[which]  # each record's row
    runtime = runtime_key[which]
    steps = int(step_key[which].sum())
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
    del mthread, bounds, firsts_of

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
    del order

    # Fold an event into its parent when both have one name and it is its only child
    # (profile_of's _merge_self_calls: the parent keeps its time; the child's children,
    # memory and kernels become the parent's).
    above = parent.astype(np.int64) + 1  # 0: none
    nchild = np.bincount(above, minlength=n + 1)[1:].astype(np.int32)
    child = np.bincount(above, weights=dur, minlength=n + 1)[1:]
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
    node = at[some]
    slot = np.where(m["device_type"][rows[some]] == 0, 0, 2)
    amount = m["nbytes"][rows[some]]
    del at, rows, some
    np.add.at(mem, (slot, agg_of[np.where(merged[node], final[node], node)]), amount)
    while len(node):
        mine = ~merged[node]
        np.add.at(mem, (slot[mine] + 1, agg_of[node[mine]]), amount[mine])
        node = parent[node]
        up = node >= 0
        node, slot, amount = node[up], slot[up], amount[up]
    del parent

    # Device time: to the operator that launched each kernel (its External id), else to
    # the caller of the runtime call with the kernel's correlation id; and to its callers.
    d = c.device
    kdur = np.where(d["dur"] > 0, d["dur"], 0.0)
    graph_kernels, graph_us = 0, 0.0
    owners = np.empty(0, np.int64)  # the records kernels ran under, sorted
    self_dev = total_dev = np.empty(0)
    if len(kdur):
        owner = _find(launch_of, d["ext"])
        call = _find(call_of, d["corr"])
        del launch_of, call_of
        by_call = (owner < 0) & (call >= 0)
        owner[by_call] = final[call[by_call]]
        owner = np.where((owner >= 0) & merged[np.maximum(owner, 0)],
                         final[np.maximum(owner, 0)], owner)
        mine = np.flatnonzero(owner >= 0)
        # each kernel's record and every caller's, with the kernel: summed per record in
        # the kernels' order, as profile_of adds them
        nodes, kernels, own = [], [], []
        node = owner[mine]
        top = True
        while len(node):
            nodes.append(node)
            kernels.append(mine)
            own.append(np.full(len(node), top))
            top = False
            node = final[node]
            up = node >= 0
            node, mine = node[up], mine[up]
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

    kernel_aggs: dict[tuple[str, str], _Agg] = {}
    for kind, table, durs in ((KIND_KERNEL, d, kdur),
                              (KIND_DEVICE_ANNOTATION, c.device_annotations,
                               np.where(c.device_annotations["dur"] > 0,
                                        c.device_annotations["dur"], 0.0))):
        names, rows = np.unique(table["name"], return_inverse=True)
        rows = rows.reshape(-1)
        if not len(rows):
            continue
        firsts = np.full(len(names), len(rows))
        np.minimum.at(firsts, rows, np.arange(len(rows)))
        time = np.bincount(rows, weights=durs, minlength=len(names)).tolist()
        count = np.bincount(rows, minlength=len(names)).tolist()
        for r in np.argsort(firsts, kind="stable").tolist():
            name = c.names[int(names[r])]
            agg = kernel_aggs.get((name, kind))
            if agg is None:
                agg = kernel_aggs[(name, kind)] = _Agg(name, kind)
            agg.calls += count[r]
            agg.self_dev += time[r]
            agg.dev_total += time[r]

    ops = [_to_op(a, scale) for a in aggs.values() if a.calls]
    ops += [_to_op(a, scale) for a in kernel_aggs.values()]
    props = c.meta.get("deviceProperties")
    props = props if isinstance(props, list) else []
    names_rt = (o.name for o in ops if o.kind == KIND_RUNTIME)
    return Profile(
        device_type=devices.of("cuda", _device_name(props), runtime_calls=names_rt).kind
        if len(kdur) else None,
        self_cpu_us=sum(a.self_cpu for a in aggs.values()) * scale,
        self_device_us=sum(a.self_dev for (_, kind), a in kernel_aggs.items()
                           if kind == KIND_KERNEL) * scale,
        steps=steps, ops=ops, device_name=_device_name(props),
        device_mem_capacity_b=_device_memory(props), graph_kernels=graph_kernels,
        graph_kernel_us=graph_us * scale, peak_live_b=peak_live)


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
    live: dict[int, tuple[int, int]] = {}
    for w in range(0, peak + 1, _WINDOW):
        window = rows[w:min(peak + 1, w + _WINDOW)]
        for nbytes, addr, op in zip(m["nbytes"][window].tolist(), m["addr"][window].tolist(),
                                    of[w:w + len(window)].tolist()):
            if nbytes > 0:
                live[addr] = (nbytes, op)
            else:
                live.pop(addr, None)
    by_op: dict[str, int] = defaultdict(int)
    for nbytes, op in live.values():
        if op >= 0:
            by_op[shown[op]] += nbytes
    return dict(by_op)


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


