"""A trace's events as the reader decodes them (the events' fields with and without
shapes, calls and costs), and the timeline record they are sorted into (timeline_of:
reporter.model.timeline, which the analyses read)."""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any, Iterable, Optional, Union

import msgspec

from ..model.timeline import (
    DEVICE_ANNOTATION_CATS,
    DEVICE_CATS,
    HOST_CATS,
    MODULE_PREFIX,
    Event,
    MemoryEvent,
    Timeline,
)


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


_FLOAT_MAX = sys.float_info.max  # a time beyond it (or not finite) is left out with its event


def timeline_of(chunks: Iterable[list[_Event]], meta: dict[str, Any]) -> Timeline:
    """The timeline record of a trace's decoded events (given as lists of events; ``meta``
    holds the trace's other top-level fields once ``chunks`` is exhausted): host events by
    thread, device work, the device's marks, module calls, memory events."""
    threads: dict[Any, list[Event]] = {}  # (pid, tid) -> host events
    device: list[Event] = []  # kernels, copies, sets
    device_ann: list[Event] = []  # gpu_user_annotation
    py_modules: list[Event] = []  # python_function "nn.Module: ..." events
    # (pid, tid) -> [(ts, bytes, device type, address, the device's total allocated)]
    memory: dict[Any, list[MemoryEvent]] = defaultdict(list)
    host, dev_cats, dev_ann = HOST_CATS, DEVICE_CATS, DEVICE_ANNOTATION_CATS
    last_pid = last_tid = thread = None
    big, low = _FLOAT_MAX, -_FLOAT_MAX
    strings: dict[str, str] = {}
    share = strings.setdefault
    for events in chunks:
        for e in events:
            ph = e.ph
            if not (low <= e.ts <= big and low <= e.dur <= big):
                continue  # a time no float holds (400 digits), or not finite: left out
            if ph == "X":
                cat = e.cat
                if cat in host:
                    # Events come in runs from one thread: look its list up once per run.
                    if thread is None or e.tid != last_tid or e.pid != last_pid:
                        last_pid, last_tid = e.pid, e.tid
                        thread = threads.get((last_pid, last_tid))
                        if thread is None:
                            thread = threads[(last_pid, last_tid)] = []
                    thread.append(e)
                elif cat in dev_cats:
                    device.append(e)
                elif cat in dev_ann:
                    device_ann.append(e)
                elif cat == "python_function" and e.name.startswith(MODULE_PREFIX):
                    py_modules.append(e)  # with_stack traces: module calls
                else:
                    continue
                # A kept event's name and category: one string object for each (msgspec
                # makes one per event: about 95 bytes an event, for 5-10% more time).
                e.cat = share(cat, cat)
                e.name = share(e.name, e.name)
            elif ph == "i" and e.name == "[memory]" and e.args is not None:
                fields = memory_fields(e.args)
                if fields is not None:
                    memory[(e.pid, e.tid)].append((e.ts, *fields))
    return Timeline(threads=threads, device=device, device_annotations=device_ann,
                    modules=py_modules, memory=dict(memory), meta=meta)


def memory_fields(a: Any) -> tuple[int, int, int, int] | None:
    """A memory event's bytes (negative for a free), device type (0 the host), and where it
    was allocated and the allocator's total after it (for _peak_live only: -1 where not a
    whole number); None for a malformed one."""
    try:
        nbytes, device_type = int(a.nbytes), int(a.device_type or 0)
    except (TypeError, ValueError, OverflowError):
        return None
    return nbytes, device_type, _count(a.addr), _count(a.total)


def _count(value: Any) -> int:
    """A non-negative integer field of an event, or -1 where it is not one."""
    return value if type(value) is int and value >= 0 else -1
