"""A trace's timeline as columns: the record reporter.ingest.columns fills from a trace's
events, a numpy array per field, for the analyses that read it (#68: a trace of millions
of events held in about a hundred bytes an event, where the object record of
reporter.model.timeline takes five times that).

It holds what the object record holds, in its order: the host's events (in the order the
trace gave them) and the memory events, each a table of columns of one length; the
device's work both as columns and as the decoded events (the analyses that read device
work one kernel at a time read those: a trace holds a sixth as much device work as host
events, or none), and the device's copies of the marks and the module calls as decoded
events (a trace holds few). Strings are ids into
``names``, ``cats`` and ``threads`` (a thread is a (pid, tid) pair); ids of events
(External id, correlation, sequence number) are int64 codes (``NONE`` where the event has
none; an id that is not a whole number, which no trace we know writes, is a code under
``ODD``, one per distinct value). Times are float64 in the trace's unit, as the trace wrote
them: exact for whole numbers under 2**53 (every timestamp we have seen, nanosecond ones
included, is under 2**51).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

NONE = -(1 << 63)  # the event has no such id
ODD = -(1 << 62)  # codes under this are ids that are not whole numbers (strings, fractions)
# the fields of each table, and their types
HOST = {"name": np.int32, "cat": np.int16, "thread": np.int32, "ts": np.float64,
        "dur": np.float64, "ext": np.int64, "corr": np.int64, "seq": np.int64}
DEVICE = {"name": np.int32, "cat": np.int16, "thread": np.int32, "ts": np.float64,
          "dur": np.float64, "ext": np.int64, "corr": np.int64, "copied": np.int64}
MEMORY = {"thread": np.int32, "ts": np.float64, "nbytes": np.int64, "device_type": np.int64,
          "addr": np.int64, "total": np.int64}


@dataclass
class Columns:
    """What the timeline analyses read of a trace, as columns. ``host["ext"]`` is the
    External id (torch 1.8's "external id" where the newer is absent); ``device["copied"]``
    the bytes a copy moved (-1 where not given); a memory event's address and allocator
    total are -1 where the trace gave no whole number, as in reporter.model.timeline."""

    names: list[str] = field(default_factory=list)
    cats: list[str] = field(default_factory=list)
    threads: list[tuple[Any, Any]] = field(default_factory=list)
    host: dict[str, np.ndarray] = field(default_factory=dict)
    device: dict[str, np.ndarray] = field(default_factory=dict)  # kernels, copies, sets
    memory: dict[str, np.ndarray] = field(default_factory=dict)
    # the decoded events (reporter.model.timeline.Event): the device's work, in the order
    # of ``device``; its marks (gpu_user_annotation); the "nn.Module: ..." calls
    device_events: list[Any] = field(default_factory=list)
    device_annotations: list[Any] = field(default_factory=list)
    modules: list[Any] = field(default_factory=list)
    # the ids that are not whole numbers, by code: ODD - 1 - i is odd[i]
    odd: list[Any] = field(default_factory=list)
    # the modelled operators' calls whose cost (reporter.analyze.flops.Cost) the reader
    # computed (read with costs): their host rows, in order, and their costs
    cost_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    costs: list[Any] = field(default_factory=list)
    # a host event's inputs' shapes by its host row, where the reader parsed them (its
    # plain parser, for a file or chunk it could not decode by its types)
    dims: dict[int, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    # whether the first host event's start (else the first device work's) was a whole
    # number: kineto's nanosecond mode writes whole nanoseconds (reporter.model.timeline's
    # Timeline.scale)
    whole_first_ts: bool = False

    def __post_init__(self) -> None:
        self._odd_codes = {v: ODD - 1 - i for i, v in enumerate(self.odd)}

    @property
    def scale(self) -> float:
        """Microseconds per unit of the events' times (Timeline.scale)."""
        ns = self.meta.get("displayTimeUnit") == "ns" and self.whole_first_ts
        return 1e-3 if ns else 1.0

    def nbytes(self) -> int:
        """The columns' bytes (the tables of strings and the decoded events not counted)."""
        return sum(a.nbytes for table in (self.host, self.device, self.memory)
                   for a in table.values())

    def code(self, value: Any) -> int:
        """A value's code in the id columns (NONE where no event has it)."""
        if value is None:
            return NONE
        if type(value) is int and -(1 << 62) < value < 1 << 62:
            return value
        if type(value) is float and value.is_integer() and -(1 << 62) < value < 1 << 62:
            return int(value)
        return self._odd_codes.get(value, NONE)

    def value(self, code: int) -> Any:
        """The id a column's code stands for (None for NONE)."""
        if code == NONE:
            return None
        return self.odd[ODD - 1 - code] if code < ODD else code


class HostArgs:
    """The ids of a host event read back from the columns (an Event's ``args``)."""

    __slots__ = ("ext", "ext_old", "corr", "seq", "dims", "dims_old")

    def __init__(self, ext: Any, corr: Any, seq: Any, dims: Any = None) -> None:
        self.ext, self.ext_old, self.corr, self.seq = ext, None, corr, seq
        self.dims, self.dims_old = dims, None


class HostEvent:
    """A host event read back from the columns, for an analysis that reads events one at a
    time (reporter.model.timeline.Event)."""

    __slots__ = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")
    ph: str
    cat: str
    name: str
    pid: Any
    tid: Any
    ts: int | float
    dur: int | float
    args: Any

    def __init__(self, cat: str, name: str, pid: Any, tid: Any, ts: Any, dur: Any,
                 args: HostArgs | None) -> None:
        self.ph, self.cat, self.name, self.pid, self.tid = "X", cat, name, pid, tid
        self.ts, self.dur, self.args = ts, dur, args
