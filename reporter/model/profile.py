"""The Profile: what every path into the analyzer produces.

A Profile is raw numbers only: times in microseconds, memory in bytes. It does
not import torch, so that reading and analysing stored runs stays light.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from . import vendors

# What an operator row is. The analyzer shares time among "op" and
# "dataloader" rows; kernels and runtime calls are views of the same time.
KIND_OP = "op"
KIND_KERNEL = "kernel"  # device-side work: kernels, memcpy, memset
KIND_RUNTIME = "runtime"  # cudaLaunchKernel, cudaStreamSynchronize, ...
KIND_ANNOTATION = "annotation"  # record_function marks, ProfilerStep#N
KIND_DATALOADER = "dataloader"  # enumerate(DataLoader)#...
# The device's copy of a record_function mark (gpu_user_annotation): it takes a host
# mark's name ("forward", "ProfilerStep#3") but is neither a host mark nor a step.
KIND_DEVICE_ANNOTATION = "device_annotation"

# Marks the runner puts around the phases of a step.
PHASE_MARKS = ("data_loading", "input_copy", "forward", "loss", "backward", "optimizer_step")

# The vendors' runtime calls and kernel names are their table's (reporter.model.vendors).
_RUNTIME_RE = re.compile(
    rf"^({'|'.join(vendors.names('runtime_calls') + vendors.OTHER_RUNTIME_CALLS)})[A-Z]\w*")
TRITON_PREFIX = "triton_"
_KERNEL_HINTS = ("void ", "Memcpy", "Memset", TRITON_PREFIX, "Kernel", "kernel",
                 *vendors.names("kernel_hints"))


def classify(name: str, device_side: bool = False, host_side: bool = False) -> str:
    """Guess what a row is from its name (and, when known, its device type). A row named
    like a Triton kernel that took host time (``host_side``) is Inductor's launcher of
    that kernel on the host, an operator whose device time is its kernel's: counted as
    a kernel too, it doubled every compiled kernel's time on a GPU (transformer-compiled
    on an H200, 2026-12-04: each Triton kernel listed twice among the top kernels)."""
    if name.startswith("enumerate(DataLoader)"):
        return KIND_DATALOADER
    if (name.startswith("ProfilerStep") or name in PHASE_MARKS
            or name.startswith(("Optimizer.step#", "Optimizer.zero_grad#", "## ", "module::"))):
        return KIND_ANNOTATION
    if device_side:
        return KIND_KERNEL
    if host_side and name.startswith(TRITON_PREFIX):
        return KIND_OP
    if _RUNTIME_RE.match(name):
        return KIND_RUNTIME
    if "::" not in name and any(h in name for h in _KERNEL_HINTS):
        return KIND_KERNEL
    return KIND_OP


@dataclass
class Op:
    """One row of key_averages(): an operator aggregated over its calls."""

    name: str
    calls: int = 0
    self_cpu_us: float = 0.0
    cpu_total_us: float = 0.0
    self_device_us: float = 0.0
    device_total_us: float = 0.0
    cpu_mem_b: int = 0
    self_cpu_mem_b: int = 0
    device_mem_b: int = 0
    self_device_mem_b: int = 0
    kind: str = KIND_OP
    input_shapes: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Op":
        known = {f for f in cls.__dataclass_fields__}
        op = cls(**{k: v for k, v in data.items() if k in known})
        if op.kind == KIND_KERNEL and op.cpu_total_us > 0 and op.name.startswith(TRITON_PREFIX):
            op.kind = KIND_OP  # a run stored before classify knew Inductor's launchers
        return op


@dataclass
class Breakdown:
    """Where each profiled step's time went (reporter.analyze.breakdown), in microseconds.

    ``host_us`` maps each host phase to its time per step; the phases of a step sum
    to ``steps_us``. ``device_us`` (GPU traces) does the same for device activity,
    idle time included; ``device_notes_us`` holds parts of it that are not extra time:
    communication hidden behind compute, copies from pageable host memory.
    ``marked``: the steps are the profiler's ProfilerStep ranges (else the whole
    trace is one step); ``phases_found``: some mark named a phase.
    """

    steps_us: list[float]
    host_us: dict[str, list[float]]
    device_us: dict[str, list[float]] = field(default_factory=dict)
    device_notes_us: dict[str, list[float]] = field(default_factory=dict)
    # Per stream that runs compute kernels, when more than one does: its busy time and
    # its own idle time by cause (analyze.breakdown.STREAM_ACTIVITIES), per step.
    stream_us: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # How the host feeds the device (analyze.breakdown.launch_statistics): the delay from
    # launch to kernel start (median, p90, max, us), kernels launched per step, the steps
    # in which the queue ran dry. Empty without kernels whose launch the trace holds.
    launch: dict[str, float] = field(default_factory=dict)
    # Copies inside the steps per direction and memory kind (analyze.breakdown.
    # copy_statistics): count, bytes, time (us, all steps), achieved and peak GB/s.
    copies: list[dict[str, Any]] = field(default_factory=list)
    # Per module (runner's module:: marks, or nn.Module events): mean per step, inclusive
    # of the modules inside; depth 0 is the outermost.
    module_forward_us: dict[str, float] = field(default_factory=dict)
    module_backward_us: dict[str, float] = field(default_factory=dict)
    module_depth: dict[str, int] = field(default_factory=dict)
    # The chain of host and device work that sets each step's length (analyze.
    # critical_path): mean per step on it by host phase, device activity and the links
    # between, and each one's whole time in the step. Empty for runs stored before it.
    critical: dict[str, Any] = field(default_factory=dict)
    # Per name of a host call that waits for the device: [its time outside the steps (us,
    # whole trace), its calls wholly outside them]; what the profiler's own closing
    # synchronisation adds to the operator table (analyze.breakdown._outside_steps).
    sync_outside: dict[str, list[float]] = field(default_factory=dict)
    # Per stream, inside the steps: launches outstanding (launched, not yet ended), as a
    # time-weighted "mean" and a "max", and "full_us" per step at a full launch queue
    # (analyze.breakdown.queue_lengths). Empty for runs stored before it.
    queue: dict[str, dict[str, float]] = field(default_factory=dict)
    marked: bool = True
    phases_found: bool = True

    def mean(self, values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    def means(self) -> dict[str, Any]:
        """Mean per step: of the step, of each host phase, of each device activity."""
        return {"step_us": self.mean(self.steps_us),
                "host_us": {k: self.mean(v) for k, v in self.host_us.items()},
                "device_us": {k: self.mean(v) for k, v in self.device_us.items()}}


@dataclass
class OpCalls:
    """One operator's calls read call by call from a trace (reporter.ingest.traces.
    _op_calls), for an operator that holds a large share of the time: its calls per
    profiled step; in the step with the most of them, how many there were and the
    elements of their inputs at the first and the last call (0 where the trace recorded
    no shapes), and whether they grew call by call, roughly linearly (``growing``: each
    call works on all that came before, a quadratic pattern); the innermost module the
    runner marked around most of them (``module``, its qualified name) and where that
    module's ``forward`` is defined (``forward_at``, "file:line", set by the runner);
    the first line of the user's own code around them, where the trace recorded Python
    frames (``source``, "file:line": a trace taken with ``with_stack=True``)."""

    calls_per_step: float = 0.0
    step_calls: int = 0
    first_elements: int = 0
    last_elements: int = 0
    growing: bool = False
    module: str | None = None
    forward_at: str | None = None
    source: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OpCalls":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Profile:
    """Aggregated operators of one profiled window, plus its totals.

    ``device_type`` is "cuda" (or another accelerator) when device activity was
    recorded, else None. Totals are the footers of key_averages().table():
    ``self_cpu_us`` is "Self CPU time total", ``self_device_us`` is "Self CUDA
    time total".
    """

    label: str = ""
    device_type: str | None = None
    self_cpu_us: float = 0.0
    self_device_us: float = 0.0
    steps: int = 0
    # Known for live runs on a GPU; None when the input does not say.
    # Time in collectives (union of their intervals) and the part that overlaps
    # computation; None when the profile holds no communication.
    comm_us: float | None = None
    comm_overlap_us: float | None = None
    peak_device_mem_b: int | None = None
    device_mem_capacity_b: int | None = None
    device_name: str | None = None
    ops: list[Op] = field(default_factory=list)
    ops_by_shape: list[Op] = field(default_factory=list)
    # From a trace; None for tables (no timeline) and runs stored before it existed.
    breakdown: Breakdown | None = None
    # The FLOPs and bytes of the operators reporter.analyze.flops models, summed per (name, dtype,
    # family, phase) with their time ("device" time on a GPU, inclusive "cpu" time
    # otherwise: cost_basis); the self time of the operators no formula covers, the
    # longest first; whether the input recorded shapes and dtypes at all.
    costs: list[dict[str, Any]] = field(default_factory=list)
    cost_basis: str | None = None
    not_modelled_us: dict[str, float] = field(default_factory=dict)
    shapes_recorded: bool = False
    # CUDA graphs (from a trace): the kernels a graph launch replayed, and their device time.
    graph_kernels: int = 0
    graph_kernel_us: float = 0.0
    # torch.compile's events beyond their sums (reporter.analyze.timeline_costs._compiled_facts):
    # the generated kernels per compiled region, the graph breaks between regions. Empty
    # for tables, profiles of eager code, and runs stored before it.
    compiled: dict[str, Any] = field(default_factory=dict)
    # Per-rank traces: the ranks' steps and the slowest rank's extra time by cause
    # (analyze.stragglers), on the first rank's profile (the one a report shows).
    stragglers: dict[str, Any] = field(default_factory=dict)
    # From a trace with memory recorded: the host memory live at the peak of the profiled
    # window, by the operator that allocated it (reporter.analyze.timeline._peak_live). Empty
    # for tables, GPU-only memory, and runs stored before it.
    peak_live_b: dict[str, int] = field(default_factory=dict)
    # From a trace: the calls of the operators that hold the most self time (a quarter
    # of it or more), read call by call (OpCalls). Empty for tables and runs stored
    # before it.
    op_calls: dict[str, OpCalls] = field(default_factory=dict)
    # The host's page faults per step timed without the profiler, what one costs, and that
    # step (``faults``, ``fault_us``, ``step_us``), the faults the profiler added and its
    # cost per call (``added_faults``, ``call_us``): from the run's Section.profiler_cost,
    # set by reporter.analyze.analyzer.analyze_section for the rules. Not stored: the
    # section holds the measurement.
    host_faults: dict[str, float] = field(default_factory=dict)
    # The process state the runner observed around the target's step (grad mode, anomaly
    # detection, threads, what the runner itself set: see run.Section.process), set by
    # reporter.analyze.analyzer.analyze_section for the rules as host_faults is. Empty for
    # imported profiles and runs stored before it. Not stored: the section holds it.
    process: dict[str, Any] = field(default_factory=dict)
    # From a trace: the stamp of the code that read its timeline
    # (reporter.ingest.traces.timeline_stamp). A stored run whose stamp is not today's,
    # and which kept its trace, has its timeline read again when it is rendered
    # (reporter.inputs.load_run). None for tables and runs stored before it.
    timeline: str | None = None

    @property
    def has_device(self) -> bool:
        return self.device_type is not None and self.self_device_us > 0

    def top(self, key: str, n: int = 15, kinds: tuple[str, ...] | None = None,
            shapes: bool = False) -> list[Op]:
        rows = self.ops_by_shape if shapes else self.ops
        if kinds is not None:
            rows = [o for o in rows if o.kind in kinds]
        rows = [o for o in rows if getattr(o, key) > 0]
        return sorted(rows, key=lambda o: getattr(o, key), reverse=True)[:n]

    def totals(self) -> dict[str, float]:
        return {"self_cpu_us": self.self_cpu_us, "self_device_us": self.self_device_us}

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["host_faults"]  # the section's measurement, not the profile's
        del data["process"]  # the section's observation, likewise
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Profile":
        return cls(
            label=data.get("label", ""),
            device_type=data.get("device_type"),
            self_cpu_us=data.get("self_cpu_us", 0.0),  # types: checked by reporter.validate
            self_device_us=data.get("self_device_us", 0.0),
            steps=data.get("steps", 0),
            comm_us=data.get("comm_us"),
            comm_overlap_us=data.get("comm_overlap_us"),
            peak_device_mem_b=data.get("peak_device_mem_b"),
            device_mem_capacity_b=data.get("device_mem_capacity_b"),
            device_name=data.get("device_name"),
            ops=[Op.from_dict(o) for o in data.get("ops", [])],
            ops_by_shape=[Op.from_dict(o) for o in data.get("ops_by_shape", [])],
            breakdown=(Breakdown(**data["breakdown"])
                       if isinstance(data.get("breakdown"), dict) else None),
            costs=list(data.get("costs") or []),
            cost_basis=data.get("cost_basis"),
            not_modelled_us=dict(data.get("not_modelled_us") or {}),
            shapes_recorded=bool(data.get("shapes_recorded", False)),
            graph_kernels=data.get("graph_kernels", 0),
            graph_kernel_us=data.get("graph_kernel_us", 0.0),
            compiled=dict(data.get("compiled") or {}),
            stragglers=dict(data.get("stragglers") or {}),
            peak_live_b=dict(data.get("peak_live_b") or {}),
            op_calls={k: OpCalls.from_dict(v) for k, v in data["op_calls"].items()
                      if isinstance(v, dict)}
            if isinstance(data.get("op_calls"), dict) else {},
            timeline=data.get("timeline"),
        )


# A gap between device work whose next work was launched before the gap began, and that
# lasts at most this long, is the launch's own latency: the device fetching and setting up
# the next kernel. Between kernels queued on one stream that takes 1-5 us (on the corpus,
# 90% of such gaps on the busiest stream are at most 5 us on an A100, trace 07, and 7 us
# on a V100, 13; CUPTI's timestamps add about a microsecond). Twice the longest of these
# leaves room; a queued gap longer than that waits on something: another stream's work
# (an event, a stream wait), a dependency.
LATENCY_US = 10.0
