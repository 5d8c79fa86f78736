"""A trace's events as the reader decodes them (the categories, the events' fields with
and without shapes, calls and costs), the host record's fields, and one operator's sums
(_Agg)."""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Optional, Union

import msgspec


# Host events that nest on a thread and count as CPU time, like key_averages' events.
HOST_CATS = {"cpu_op", "Operator", "user_annotation", "cuda_runtime", "Runtime",
             "cuda_driver", "Driver", "xpu_runtime", "mtia_runtime", "privateuse1_runtime"}
RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "Driver", "xpu_runtime",
                "mtia_runtime", "privateuse1_runtime"}
# Device work: kernels, copies and sets (AMD traces use the same categories).
DEVICE_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset",
               "mtia_ccp_events"}
DEVICE_ANNOTATION_CATS = {"gpu_user_annotation"}
OP_CATS = {"cpu_op", "Operator"}
_EPS = 1e-3  # microseconds of slack when deciding whether one event encloses another


# What aggregation reads of an event. msgspec decodes these fields and skips the
# rest of each event (most of its bytes: input types, strides, concrete inputs)
# without building Python objects for it, which is most of the cost of reading
# a trace with a general JSON parser.
# Ids and thread keys index dicts: anything but a scalar sends the chunk to _coerce.
_Id = Union[int, float, str, None]


class _Args(msgspec.Struct, gc=False):
    ext: _Id = msgspec.field(name="External id", default=None)
    ext_old: _Id = msgspec.field(name="external id", default=None)  # torch 1.8
    corr: _Id = msgspec.field(name="correlation", default=None)
    nbytes: Any = msgspec.field(name="Bytes", default=None)  # [memory] events
    device_type: Any = msgspec.field(name="Device Type", default=None)
    addr: Any = msgspec.field(name="Addr", default=None)  # [memory] events
    total: Any = msgspec.field(name="Total Allocated", default=None)  # [memory] events
    seq: Any = msgspec.field(name="Sequence number", default=None)  # autograd's, fwd <-> bwd
    copied: Any = msgspec.field(name="bytes", default=None)  # gpu_memcpy events: bytes copied


class _ShapeArgs(_Args, gc=False):
    dims: Any = msgspec.field(name="Input Dims", default=None)
    dims_old: Any = msgspec.field(name="Input dims", default=None)
    types: Any = msgspec.field(name="Input type", default=None)
    concrete: Any = msgspec.field(name="Concrete Inputs", default=None)


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: _Id = None
    tid: _Id = None
    ts: Union[int, float] = 0
    dur: Union[int, float] = 0
    args: Optional[_Args] = None


class _ShapeEvent(_Event, gc=False):
    args: Optional[_ShapeArgs] = None


# The host's calls in order, with their inputs' strides too (host_calls): a view made by
# expand has a stride of 0 where it broadcasts.
class _CallArgs(_ShapeArgs, gc=False):
    strides: Any = msgspec.field(name="Input Strides", default=None)


class _CallEvent(_Event, gc=False):
    args: Optional[_CallArgs] = None


# Costs need the inputs of the operators reporter.analyze.flops models only. Parsing every
# event's inputs would double the time of reading a trace: events are decoded without
# them, and _scan_costs reads the modelled operators' inputs from the chunk's bytes.
class _CostArgs(_Args, gc=False):
    # Set by _scan_costs (no trace has this key): the call's flops.Cost or None.
    computed: Any = msgspec.field(name="reporter: computed", default=None)


class _CostEvent(_Event, gc=False):
    args: Optional[_CostArgs] = None


class _Agg:
    """Per-name sums, the same fields as one key_averages() row."""

    __slots__ = ("name", "kind", "calls", "self_cpu", "cpu_total", "self_dev", "dev_total",
                 "cpu_mem", "self_cpu_mem", "dev_mem", "self_dev_mem")

    def __init__(self, name: str, kind: str):
        self.name, self.kind = name, kind
        self.calls = 0
        self.self_cpu = self.cpu_total = self.self_dev = self.dev_total = 0.0
        self.cpu_mem = self.self_cpu_mem = self.dev_mem = self.self_dev_mem = 0

    def add(self, dur: float, child: float, self_dev: float, dev_total: float,
            mem: list | None) -> None:
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
(_AGG, _PARENT, _CHILD, _SDEV, _TDEV, _MEM, _END, _DUR, _NCHILD, _MERGED, _EVENT, _COST,
 _INSIDE, _PHASE) = range(14)
