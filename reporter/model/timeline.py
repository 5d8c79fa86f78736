"""A trace's timeline: the record a trace reader hands the timeline analyses.

The reader (reporter.ingest.traces) decodes a Chrome trace's events and sorts them into
this record: each host thread's events, the device's work, the device's copies of the
marks, the module calls, the memory events. The analyses (reporter.analyze.timeline:
nesting and sums per operator, device attribution, memory, the step breakdown, the
critical path, compile facts, FLOP costs, the calls read one by one) read the record and
nothing else, so a new way to read a timeline (another file format) is a new reader that
fills this record, and a change to an analysis reads no decoder.

An event is anything with the fields of ``Event`` (the reader's decoded structs have
them); its ``args`` hold what the reader decoded of the event's arguments, None when it
has none: the ids (``ext``, ``ext_old``, ``corr``), memory (``nbytes``, ``device_type``,
``addr``, ``total``), ``seq``, ``copied``, and where the reader was asked for them the
inputs (``dims``, ``dims_old``, ``types``, ``concrete``, ``strides``) or the cost it
computed from them (``computed``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Union

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
MODULE_PREFIX = "nn.Module: "  # python_function events of with_stack traces: module calls

Id = Union[int, float, str, None]  # a process, thread, External or correlation id


class Event(Protocol):
    """One complete ("X") event of the trace, as the analyses read it (times in the
    trace's unit: Timeline.scale turns them into microseconds)."""

    ph: str
    cat: str
    name: str
    pid: Id
    tid: Id
    ts: int | float
    dur: int | float
    args: Any


# A memory event: (time, bytes: negative for a free, device type: 0 the host, address,
# the allocator's total after it); -1 where the trace gave no whole number.
MemoryEvent = tuple[Union[int, float], int, int, int, int]


@dataclass
class Timeline:
    """What the timeline analyses read of a trace. Each thread's events are in the
    order the trace gave them (profile_of sorts them in place); events whose time no float
    holds are left out by the reader."""

    threads: dict[tuple[Id, Id], list[Event]] = field(default_factory=dict)  # host events
    device: list[Event] = field(default_factory=list)  # kernels, copies, sets
    device_annotations: list[Event] = field(default_factory=list)  # gpu_user_annotation
    modules: list[Event] = field(default_factory=list)  # "nn.Module: ..." calls
    memory: dict[tuple[Id, Id], list[MemoryEvent]] = field(default_factory=dict)
    # the trace's other top-level fields (deviceProperties, displayTimeUnit, ...)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def scale(self) -> float:
        """Microseconds per unit of the events' times: kineto's nanosecond mode writes
        integer nanoseconds and says so; everything else is in microseconds."""
        first = next((evs[0] for evs in self.threads.values() if evs),
                     self.device[0] if self.device else None)
        int_ts = first is not None and type(first.ts) is int
        return 1e-3 if self.meta.get("displayTimeUnit") == "ns" and int_ts else 1.0
