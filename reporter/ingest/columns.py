"""A Chrome trace's events gathered into columns (reporter.model.columns), one decoded
chunk at a time (reporter.ingest.traces.read_columns cuts and decodes them), as
reporter.ingest.trace_events.timeline_of sorts them: the host's events and the memory
events into numpy arrays, with the chunk's Python objects dropped after it; the device's
work into arrays and kept as decoded, its marks and the module calls kept as decoded. What
a trace takes once read is then its columns (about 50 bytes an event) and its device
work's objects, not every event's objects (about 550 bytes an event).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from ..model.columns import DEVICE, HOST, MEMORY, NONE, ODD, Columns
from ..analyze.flops import FORMULAS, cost
from ..model.timeline import (
    DEVICE_ANNOTATION_CATS,
    DEVICE_CATS,
    HOST_CATS,
    MODULE_PREFIX,
    OP_CATS,
)
from .trace_events import _FLOAT_MAX, _count, _Event, memory_fields

_WHOLE = 1 << 62  # an id a column holds as it is: a whole number within +-2**62


class _Tables:
    """The strings and odd ids a part of a trace names, each given the next id."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.threads: dict[tuple[Any, Any], int] = {}
        self.odd: dict[Any, int] = {}  # an id that is not a whole number -> its code

    def code(self, value: Any) -> int:
        """An event's id as an int64: itself when whole, NONE when absent, else a code
        under ODD that stands for the value (as a dict key: 5.0 is 5)."""
        if type(value) is int and -_WHOLE < value < _WHOLE:
            return value
        if value is None:
            return NONE
        if type(value) is float and value.is_integer() and -_WHOLE < value < _WHOLE:
            return int(value)
        odd = self.odd
        found = odd.get(value)
        if found is None:
            found = odd[value] = ODD - 1 - len(odd)
        return found


class _Part:
    """One chunk's events as columns, with the tables its ids index."""

    def __init__(self, tables: _Tables, tables_of: dict[str, dict[str, np.ndarray]],
                 events: dict[str, list[_Event]], costs: list[tuple[int, Any]],
                 dims: list[tuple[int, Any]], first_host: bool | None,
                 first_device: bool | None) -> None:
        self.names = list(tables.names)
        self.cats = list(tables.cats)
        self.threads = list(tables.threads)
        self.odd = list(tables.odd)
        self.tables = tables_of
        self.events = events  # the decoded events kept: device work, its marks, modules
        self.costs = costs  # (host row, the call's flops.Cost) of the modelled operators
        self.dims = dims  # (host row, its inputs' shapes) where they were parsed
        # whether the chunk's first host event's start (first device work's) was whole
        self.first_host, self.first_device = first_host, first_device


def gather(events: list[_Event]) -> _Part:
    """A chunk's events as columns: what timeline_of keeps of them, in the same order."""
    t = _Tables()
    name_id, cat_id, thread_id, code = t.names.setdefault, t.cats.setdefault, \
        t.threads.setdefault, t.code
    host: dict[str, list[Any]] = {k: [] for k in HOST}
    device: dict[str, list[Any]] = {k: [] for k in DEVICE}
    kept: dict[str, list[_Event]] = {"device": [], "device_annotations": [], "modules": []}
    costs: list[tuple[int, Any]] = []
    dims: list[tuple[int, Any]] = []
    memory: dict[str, list[Any]] = {k: [] for k in MEMORY}
    host_cats, dev_cats, ann_cats = HOST_CATS, DEVICE_CATS, DEVICE_ANNOTATION_CATS
    big, low = _FLOAT_MAX, -_FLOAT_MAX
    first_host = first_device = None
    for e in events:
        ph = e.ph
        if not (low <= e.ts <= big and low <= e.dur <= big):
            continue  # a time no float holds, or not finite: left out, as timeline_of does
        if ph == "X":
            cat = e.cat
            if cat in host_cats:
                if first_host is None:
                    first_host = type(e.ts) is int
                table = host
            elif cat in dev_cats:
                if first_device is None:
                    first_device = type(e.ts) is int
                table = device
                kept["device"].append(e)
            elif cat in ann_cats:
                kept["device_annotations"].append(e)
                continue
            elif cat == "python_function" and e.name.startswith(MODULE_PREFIX):
                kept["modules"].append(e)
                continue
            else:
                continue
            table["name"].append(name_id(e.name, len(t.names)))
            table["thread"].append(thread_id((e.pid, e.tid), len(t.threads)))
            table["ts"].append(e.ts)
            table["dur"].append(e.dur)
            table["cat"].append(cat_id(cat, len(t.cats)))
            a: Any = e.args  # the mode's args: with costs or, from the plain parser, inputs
            if a is None:
                table["ext"].append(NONE)
                table["corr"].append(NONE)
                table["seq" if table is host else "copied"].append(NONE if table is host
                                                                   else -1)
                continue
            table["ext"].append(code(a.ext if a.ext is not None else a.ext_old))
            table["corr"].append(code(a.corr))
            if table is host:
                table["seq"].append(a.seq if type(a.seq) is int and -_WHOLE < a.seq < _WHOLE
                                    else NONE)
                shapes = (a.dims if a.dims is not None else a.dims_old) \
                    if hasattr(a, "dims") else None  # the plain parser's events have them
                if shapes is not None:
                    dims.append((len(table["seq"]) - 1, shapes))
                if e.name in FORMULAS and cat in OP_CATS:  # profile_of's _cost_of
                    found = (a.computed if hasattr(a, "computed") else
                             cost(e.name, shapes, a.types, a.concrete) if hasattr(a, "dims")
                             else None)
                    if found is not None:
                        costs.append((len(table["seq"]) - 1, found))
            else:
                table["copied"].append(_count(a.copied) if type(a.copied) is int
                                       and a.copied < _WHOLE else -1)
        elif ph == "i" and e.name == "[memory]" and e.args is not None:
            fields = memory_fields(e.args)
            if fields is None or not all(-_WHOLE < v < _WHOLE for v in fields[:2]):
                continue  # malformed, or past what a column holds
            nbytes, device_type, addr, total = fields
            memory["thread"].append(thread_id((e.pid, e.tid), len(t.threads)))
            memory["ts"].append(e.ts)
            memory["nbytes"].append(nbytes)
            memory["device_type"].append(device_type)
            memory["addr"].append(addr if addr < _WHOLE else -1)
            memory["total"].append(total if total < _WHOLE else -1)
    tables_of = {}
    for label, table, kinds in (("host", host, HOST), ("device", device, DEVICE),
                                ("memory", memory, MEMORY)):
        tables_of[label] = {k: np.array(v, dtype=kinds[k]) for k, v in table.items()}
    return _Part(t, tables_of, kept, costs, dims, first_host, first_device)


def join(parts: Iterable[_Part], meta: dict[str, Any]) -> Columns:
    """The trace's columns from its chunks' parts, in the trace's order: each part's ids
    mapped onto the trace's tables as it comes, then each table's columns joined."""
    t = _Tables()
    kinds_of: dict[str, dict[str, Any]] = {"host": HOST, "device": DEVICE, "memory": MEMORY}
    pieces: dict[str, dict[str, list[np.ndarray]]] = {
        label: {k: [] for k in kinds} for label, kinds in kinds_of.items()}
    events: dict[str, list[_Event]] = {"device": [], "device_annotations": [], "modules": []}
    cost_rows: list[np.ndarray] = []
    costs: list[Any] = []
    dims: dict[int, Any] = {}
    host_rows = 0
    first_host = first_device = None
    for part in parts:
        if first_host is None:
            first_host = part.first_host
        if first_device is None:
            first_device = part.first_device
        names = np.array([t.names.setdefault(n, len(t.names)) for n in part.names] or [0],
                         np.int32)
        cats = np.array([t.cats.setdefault(c, len(t.cats)) for c in part.cats] or [0], np.int16)
        threads = np.array([t.threads.setdefault(k, len(t.threads)) for k in part.threads]
                           or [0], np.int32)
        odd = np.array([t.code(v) for v in part.odd] or [0], np.int64)
        for label, kept in part.events.items():
            events[label] += kept
        if part.costs:
            cost_rows.append(np.array([row for row, _ in part.costs], np.int64) + host_rows)
            costs += [found for _, found in part.costs]
        for row, shapes in part.dims:
            dims[host_rows + row] = shapes
        host_rows += len(part.tables["host"]["ts"])
        for label, table in part.tables.items():
            into = pieces[label]
            for k, column in table.items():
                if k == "name":
                    column = names[column]
                elif k == "cat":
                    column = cats[column]
                elif k == "thread":
                    column = threads[column]
                elif k in ("ext", "corr") and len(part.odd):
                    mine = (column < ODD) & (column != NONE)
                    if mine.any():
                        column = column.copy()
                        column[mine] = odd[ODD - 1 - column[mine]]
                into[k].append(column)
    tables: dict[str, dict[str, np.ndarray]] = {}
    for label, parts_of in pieces.items():
        joined: dict[str, np.ndarray] = {}
        tables[label] = joined
        for k, v in parts_of.items():  # one column at a time, its pieces let go of as joined
            joined[k] = np.concatenate(v) if v else np.empty(0, kinds_of[label][k])
            v.clear()
    first = first_host if first_host is not None else first_device
    return Columns(names=list(t.names), cats=list(t.cats), threads=list(t.threads),
                   meta=meta, whole_first_ts=bool(first), odd=list(t.odd),
                   cost_rows=np.concatenate(cost_rows) if cost_rows else np.empty(0, np.int64),
                   costs=costs, dims=dims,
                   device_events=events["device"],
                   device_annotations=events["device_annotations"],
                   modules=events["modules"], **tables)


def columns_of(chunks: Iterable[list[_Event]], meta: dict[str, Any]) -> Columns:
    """The columns of a trace's decoded events, given as lists of events (``meta`` holds
    the trace's other top-level fields once ``chunks`` is exhausted): timeline_of's
    record, as columns."""
    return join((gather(events) for events in chunks), meta)
