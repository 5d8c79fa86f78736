"""A trace's timeline as columns: the record reporter.ingest.columns fills from a trace's
events, a numpy array per field, for the analyses that read it (#68: a trace of millions
of events held in about a hundred bytes an event, where the object record of
reporter.model.timeline takes five times that).

It holds what the object record holds, in its order: the host's events (in the order the
trace gave them), the device's work, the device's copies of the marks, the module calls
and the memory events, each a table of columns of one length. Strings are ids into
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
MARKS = {"name": np.int32, "thread": np.int32, "ts": np.float64, "dur": np.float64}
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
    device_annotations: dict[str, np.ndarray] = field(default_factory=dict)
    modules: dict[str, np.ndarray] = field(default_factory=dict)  # "nn.Module: ..." calls
    memory: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    # whether the first host event's start (else the first device work's) was a whole
    # number: kineto's nanosecond mode writes whole nanoseconds (reporter.model.timeline's
    # Timeline.scale)
    whole_first_ts: bool = False

    @property
    def scale(self) -> float:
        """Microseconds per unit of the events' times (Timeline.scale)."""
        ns = self.meta.get("displayTimeUnit") == "ns" and self.whole_first_ts
        return 1e-3 if ns else 1.0

    def nbytes(self) -> int:
        """The columns' bytes (the tables of strings not counted)."""
        return sum(a.nbytes for table in (self.host, self.device, self.device_annotations,
                                          self.modules, self.memory) for a in table.values())
