"""The nesting of a CPU trace's host events in bulk: the same sums as the event-by-event
records of ``reporter.ingest.traces._aggregate``, in a fraction of the time.

``_aggregate`` builds a record (a list of 14 fields) per host event, walks a stack per
thread and adds each record to its operator's row: about 5 us of Python per event, five
times what decoding the event takes. Here one tight loop per thread finds each event's
parent (the same stack, the same tolerance) and the rest is done on whole arrays
(numpy): time in children, memory, the self-call merges, the rows' sums. Every sum is
taken in the order the records would have been added (``numpy.bincount`` adds in index
order), so the floats are the same to the last bit.

Used where that equivalence is simple to keep: no device events (a kernel's time climbs
its operator's callers, record by record), no grouping by input shape, and host events
that nest. On the first pair of events on a thread that overlap without nesting, or
anything else out of the ordinary, ``aggregate_threads`` returns None having changed
nothing, and the caller reads the trace event by event.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import attrgetter
from typing import Any, Callable

_by_ts, _by_dur = attrgetter("ts"), attrgetter("dur")
_by_cat, _by_name = attrgetter("cat"), attrgetter("name")
_BIG = 1 << 62  # memory sums stay exact in int64 below this


def aggregate_threads(threads: dict[Any, list[Any]], memory: dict[Any, list], eps: float,
                      facts_of: dict[str, dict[str, tuple]], facts: Callable[[str, str], tuple],
                      costs: bool, call_cost: Callable[[Any, Any], Any], matrix: str,
                      reads_name: Callable[[str], bool] | None = None,
                      whole_prefix: str = "") -> tuple | None:
    """The rows' sums of the host events in ``threads`` (each thread's list is sorted
    in place, as the caller's loop sorts it), or None when the bulk path does not apply.

    ``facts(name, cat)`` is the (row, collective, step, runtime, formula, phase) of an
    event's name, memoised in ``facts_of``; ``call_cost(name, args)`` the flops.Cost of a
    modelled operator's call (or None). Returns (steps, step ranges, collective work,
    collective calls, costed, brief): costed as the caller's records, for ``_costs``;
    brief, with ``reads_name``, each thread's events that the step breakdown reads (the
    first, the one that ends last, those whose name ``reads_name`` picks; the whole
    thread where a name starts with ``whole_prefix``), in order; else None."""
    import numpy as np

    rows: dict[int, int] = {}  # id(row) -> its index
    row_list: list[Any] = []
    known: dict[tuple[str, str], int] = {}  # (name, category) -> index in fact_list
    fact_list: list[tuple] = []  # (facts, row index, name)
    fact_index: dict[int, int] = {}  # id(facts) -> index in fact_list
    per_thread: list[tuple] = []
    steps = 0
    step_ranges: list[tuple] = []
    comm_work: list[tuple] = []
    comm_calls: list[tuple] = []
    costed: list[list] = []
    brief: dict[Any, list[Any]] | None = {} if reads_name is not None else None
    for key, evs in threads.items():
        n = len(evs)
        if n == 0:
            continue
        evs.sort(key=_by_ts)
        ts = list(map(_by_ts, evs))
        raw = list(map(_by_dur, evs))
        kinds = set(map(type, ts))
        kinds.update(map(type, raw))
        if kinds == {float}:
            ts_a = np.array(ts, dtype=np.float64)
            if n > 1 and (ts_a[1:] == ts_a[:-1]).any():  # ties: the enclosing event first
                evs.sort(key=_by_dur, reverse=True)
                evs.sort(key=_by_ts)
                ts = list(map(_by_ts, evs))
                raw = list(map(_by_dur, evs))
            dur_a = np.array(raw, dtype=np.float64)
            dur_a[dur_a < 0] = 0.0
            durs: list[Any] = dur_a.tolist()
            ends = (np.array(ts, dtype=np.float64) + dur_a).tolist()
        else:
            if kinds - {int, float}:
                return None
            if int in kinds and max(max(ts), -min(ts)) >= 1 << 53:
                return None  # integer nanoseconds: their sums as floats would differ
            if len(set(ts)) != n:
                evs.sort(key=_by_dur, reverse=True)
                evs.sort(key=_by_ts)
                ts = list(map(_by_ts, evs))
                raw = list(map(_by_dur, evs))
            durs = [d if d >= 0 else 0 for d in raw]
            ends = [t + d for t, d in zip(ts, durs)]
            dur_a = np.array(durs, dtype=np.float64)
        # Each event's parent: the stack of _aggregate's loop, without its records.
        # An event's descendants are the events after it up to ``last``, the one before
        # the event whose start closed it.
        parents = [-1] * n
        last = [n - 1] * n
        stack_end: list[Any] = []
        stack_i: list[int] = []
        pop_end, pop_i = stack_end.pop, stack_i.pop
        push_end, push_i = stack_end.append, stack_i.append
        i = 0
        for t, end in zip(ts, ends):
            limit = t + eps
            while stack_end and stack_end[-1] <= limit:
                pop_end()
                last[pop_i()] = i - 1
            if stack_end:
                if end > stack_end[-1] + eps:
                    return None  # overlapping but not nested: the caller's loop closes them
                parents[i] = stack_i[-1]
            push_end(end)
            push_i(i)
            i += 1
        # What each event's name is (facts, made in the order the caller's loop makes them).
        names = list(map(_by_name, evs))
        cats = list(map(_by_cat, evs))
        first_cat = dict(zip(reversed(names), reversed(cats)))  # each name's first category
        if list(map(first_cat.__getitem__, names)) == cats:  # one category per name
            here: dict[str, int] = {}
            for name in dict.fromkeys(names):
                fi = known.get((name, first_cat[name]))
                here[name] = fi if fi is not None else _fact(
                    name, first_cat[name], facts_of, facts, known, fact_index, fact_list,
                    rows, row_list)
            fi_list = list(map(here.__getitem__, names))
        else:
            pairs = list(zip(names, cats))
            for name, cat in dict.fromkeys(pairs):
                if (name, cat) not in known:
                    _fact(name, cat, facts_of, facts, known, fact_index, fact_list, rows,
                          row_list)
            fi_list = list(map(known.__getitem__, pairs))
            del pairs
        del names, cats
        fi_a = np.array(fi_list, dtype=np.int64)
        fact_of = [fact_list[k][0] for k in fi_list]
        row_a = np.array([x[1] for x in fact_list], dtype=np.int64)[fi_a]
        row_of = row_a.tolist()
        # Collectives and steps, in the records' order.
        flags = np.array([(f[1], f[2]) for f, *_ in fact_list], dtype=np.int64)[fi_a]
        for i in np.nonzero(flags[:, 0])[0].tolist():
            (comm_work if fact_of[i][1] == 1 else comm_calls).append((ts[i], ends[i]))
        for i in np.nonzero(flags[:, 1])[0].tolist():
            steps += 1
            step_ranges.append((ts[i], ends[i]))
        par = np.array(parents, dtype=np.int64)
        has_parent = par >= 0
        nchild = np.bincount(par[has_parent], minlength=n)
        child = np.bincount(par[has_parent], weights=dur_a[has_parent], minlength=n)
        child = child.astype(np.float64)
        # Self calls fold into their parent (EventList._remove_dup_nodes): an event whose
        # parent has it as its only child and the same name.
        same = np.zeros(n, dtype=bool)
        idx = np.nonzero(has_parent)[0]
        pidx = par[idx]
        single = nchild[pidx] == 1
        cand = idx[single]
        for i in cand.tolist():
            p = parents[i]
            if row_list[row_of[p]].name == row_list[row_of[i]].name:
                same[i] = True
        root = list(range(n))
        merged_list = np.nonzero(same)[0].tolist()
        for i in merged_list:  # parents first: a chain folds into its first event
            p = parents[i]
            root[i] = root[p]
            child[root[i]] = child[i]
        # Memory: each allocation to the innermost event open at its time.
        mems = memory.get(key)
        mem = None
        if mems:  # (time, bytes, device type); in any order: the sums are of integers
            nbytes = [m[1] for m in mems]
            if max(nbytes) >= _BIG or min(nbytes) <= -_BIG:
                return None
            at = [m[0] for m in mems]
            if kinds == {float} and set(map(type, at)) == {float}:
                # The last event started at or before it, then up while that one has ended.
                m_ts = np.array(at, dtype=np.float64)
                j = np.searchsorted(np.array(ts, dtype=np.float64), m_ts, side="right") - 1
                ends_a = np.array(ends, dtype=np.float64)
                live = j >= 0
                live[live] = ends_a[j[live]] <= m_ts[live]
                while live.any():
                    j[live] = par[j[live]]
                    live &= j >= 0
                    live[live] = ends_a[j[live]] <= m_ts[live]
            else:
                found = []
                for t in at:
                    k = bisect_right(ts, t) - 1
                    while k >= 0 and ends[k] <= t:
                        k = parents[k]
                    found.append(k)
                j = np.array(found, dtype=np.int64)
            charged = j >= 0
            o = j[charged]
            slot = np.where(np.array([m[2] for m in mems], dtype=np.int64) == 0, 0, 2)[charged]
            amount = np.array(nbytes, dtype=np.int64)[charged]
            mem = np.zeros((n, 4), dtype=np.int64)
            np.add.at(mem, (o, slot), amount)
            # Totals: each event's whole subtree, a run of events (prefix sums of integers).
            last_a = np.array(last, dtype=np.int64)
            for part, whole in ((0, 1), (2, 3)):
                run = np.concatenate(([0], np.cumsum(mem[:, part])))
                mem[:, whole] = run[last_a + 1] - run[:n]
            for i in merged_list:
                mem[root[i], 0] += mem[i, 0]
                mem[root[i], 2] += mem[i, 2]
        if costs:
            # Only events inside a modelled operator, or modelled, can take part.
            modelled = np.array([f[4] for f, *_ in fact_list], dtype=bool)[fi_a]
            where = np.nonzero(modelled)[0]
            cover = np.zeros(n + 1, dtype=np.int64)
            np.add.at(cover, where, 1)
            np.add.at(cover, np.array(last, dtype=np.int64)[where] + 1, -1)
            visit = np.nonzero(np.cumsum(cover[:n]) > 0)[0].tolist()
            _thread_costs(evs, visit, parents, fact_of, durs, ends, root, call_cost, matrix,
                          costed)
        if brief is not None and reads_name is not None:
            reads = np.array([2 if name.startswith(whole_prefix) else 1 if reads_name(name) else 0
                              for _, _, name in fact_list], dtype=np.int8)[fi_a]
            if reads.max(initial=0) == 2:
                brief[key] = evs
            else:
                reads[0] = 1
                reads[int(np.argmax(np.array(ends, dtype=np.float64))) if kinds == {float}
                      else max(range(n), key=ends.__getitem__)] = 1
                brief[key] = [evs[i] for i in np.nonzero(reads)[0].tolist()]
        kept = ~same
        per_thread.append((np.array(row_of, dtype=np.int64)[kept], dur_a[kept], child[kept],
                           mem[kept] if mem is not None else None))
    if not per_thread:
        return steps, step_ranges, comm_work, comm_calls, costed, brief
    # The rows' sums, in the records' order (bincount adds in index order).
    row_a = np.concatenate([t[0] for t in per_thread])
    dur_a = np.concatenate([t[1] for t in per_thread])
    child_a = np.concatenate([t[2] for t in per_thread])
    m = len(row_list)
    counts = np.bincount(row_a, minlength=m)
    total = np.bincount(row_a, weights=dur_a, minlength=m)
    own = np.bincount(row_a, weights=np.where(dur_a > child_a, dur_a - child_a, 0.0),
                      minlength=m)
    mems_a = [t[3] if t[3] is not None else np.zeros((len(t[0]), 4), dtype=np.int64)
              for t in per_thread]
    mem_rows = np.zeros((m, 4), dtype=np.int64)
    np.add.at(mem_rows, row_a, np.concatenate(mems_a))
    for r, agg in enumerate(row_list):
        if counts[r]:
            agg.calls += int(counts[r])
            agg.cpu_total += float(total[r])
            agg.self_cpu += float(own[r])
            agg.self_cpu_mem += int(mem_rows[r, 0])
            agg.cpu_mem += int(mem_rows[r, 1])
            agg.self_dev_mem += int(mem_rows[r, 2])
            agg.dev_mem += int(mem_rows[r, 3])
    return steps, step_ranges, comm_work, comm_calls, costed, brief


def _fact(name: str, cat: str, facts_of: dict, facts: Callable[[str, str], tuple],
          known: dict, fact_index: dict, fact_list: list, rows: dict, row_list: list) -> int:
    """The index of a (name, category)'s facts in ``fact_list``, made if new."""
    names = facts_of[cat]
    f = names.get(name)
    if f is None:
        f = names[name] = facts(name, cat)
    fi = fact_index.get(id(f), -1)
    if fi < 0:
        fi = fact_index[id(f)] = len(fact_list)
        agg = f[0]
        r = rows.get(id(agg))
        if r is None:
            r = rows[id(agg)] = len(row_list)
            row_list.append(agg)
        fact_list.append((f, r, name))
    known[(name, cat)] = fi
    return fi


def _thread_costs(evs: list[Any], visit: list[int], parents: list[int], fact_of: list[tuple],
                  durs: list[Any], ends: list[Any], root: list[int],
                  call_cost: Callable[[Any, Any], Any], matrix: str,
                  costed: list[list]) -> None:
    """The modelled operators' costs, as ``traces._cost_of`` assigns them record by
    record: of nested modelled operators one carries the cost. ``visit``: the events
    inside a modelled one, or modelled themselves, in order (no other can have a cost or
    be inside one that has)."""
    n = len(evs)
    cost: list[Any] = [None] * n
    inside = [False] * n
    mine: list[int] = []
    for i in visit:
        p = parents[i]
        if p >= 0 and (inside[p] or cost[p]):
            inside[i] = True
        f = fact_of[i]
        if not f[4]:
            continue
        e = evs[i]
        if e.args is None:
            continue
        c = call_cost(e.name, e.args)
        if c is None:
            continue
        above = []
        up = p
        ok = True
        while up >= 0 and (cost[up] or inside[up]):
            if cost[up]:
                if c.family != matrix and cost[up].family == matrix:
                    ok = False
                    break
                above.append(up)
            up = parents[up]
        if not ok:
            continue
        cost[i] = c
        for up in above:
            cost[up] = False
        mine.append(i)
    # As the caller's records: _costs reads the row, cost, phase, and the duration of the
    # event a merged one folded into.
    for i in mine:
        phase = fact_of[i][5]
        up = parents[i]
        while not phase and up >= 0:
            phase = fact_of[up][5]
            up = parents[up]
        costed.append([fact_of[i][0], None, 0.0, 0.0, 0.0, None, ends[i], durs[root[i]], 0,
                       False, evs[i], cost[i], inside[i], phase])
