"""The timeline analyses' working records: one operator's sums (_Agg, one key_averages()
row) and the fields of a host record (a list, for speed), shared by
reporter.analyze.timeline and reporter.analyze.timeline_costs."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

_EPS = 1e-3  # microseconds of slack when deciding whether one event encloses another


class _Agg:
    """Per-name sums, the same fields as one key_averages() row."""

    __slots__ = ("name", "kind", "calls", "self_cpu", "cpu_total", "self_dev", "dev_total",
                 "cpu_mem", "self_cpu_mem", "dev_mem", "self_dev_mem")

    def __init__(self, name: str, kind: str) -> None:
        self.name, self.kind = name, kind
        self.calls = 0
        self.self_cpu = self.cpu_total = self.self_dev = self.dev_total = 0.0
        self.cpu_mem = self.self_cpu_mem = self.dev_mem = self.self_dev_mem = 0

    def add(self, dur: float, child: float, self_dev: float, dev_total: float,
            mem: list[int] | None) -> None:
        self.calls += 1
        self.cpu_total += dur
        self.self_cpu += dur - child if dur > child else 0.0
        self.self_dev += self_dev
        self.dev_total += dev_total
        if mem is not None:
            self.self_cpu_mem += mem[0]
            self.cpu_mem += mem[1]
            self.self_dev_mem += mem[2]
            self.dev_mem += mem[3]


_by_ts, _by_dur = attrgetter("ts"), attrgetter("dur")

# Fields of a host record (a list, for speed): its name's sums (_Agg), parent
# record, time in children, self device time, total device time, memory [self
# cpu, total cpu, self device, total device] or None, end, duration, number of
# children, merged into its parent, the event, its flops.Cost (None: not modelled; False:
# modelled, but an operator inside it carries the cost), inside a modelled operator, the
# phase it runs under (PHASES).
Record = list[Any]
(_AGG, _PARENT, _CHILD, _SDEV, _TDEV, _MEM, _END, _DUR, _NCHILD, _MERGED, _EVENT, _COST,
 _INSIDE, _PHASE) = range(14)
