"""A Run: what one profiling of one target produced. Raw numbers, no torch.

A run has one section per profiled mode ("train", "inference"), each with its
throughput, memory, Profile and, for targets that have one, a side benchmark (seed
003's CPU/GPU table). Numbers only: the report prints the operator tables from the
Profile (runs stored before that hold them as text too, under "tables", unread).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from .contention import MIN_CLEAN, Disturbance, disturbed_time
from .profile import Profile
from .stats import Interval, median_interval, outliers


@dataclass
class Throughput:
    """Samples per second: timed windows without the profiler, and the profiled one.

    Windows that other work on the machine disturbed (reporter.model.contention) are
    kept, but the median, its interval, the outliers and the spread are of the
    undisturbed ones; with fewer than MIN_CLEAN of those the throughput is unreliable:
    its median is of every window, and it has no interval."""

    windows: list[float]  # samples/s of each un-profiled timed window
    steps_per_window: int
    profiled: float  # samples/s during the profiled window (profiler overhead included)
    # The disturbance of each window, in order (empty: not measured, runs before it)
    disturbance: list[Disturbance] = field(default_factory=list)

    @property
    def clean(self) -> list[float]:
        """The windows nothing disturbed (every window when that was not measured)."""
        if len(self.disturbance) != len(self.windows):
            return list(self.windows)
        return [w for w, d in zip(self.windows, self.disturbance) if not d.disturbed]

    @property
    def reliable(self) -> bool:
        """Enough undisturbed windows for a median and an interval to mean something."""
        return len(self.clean) >= min(MIN_CLEAN, len(self.windows))

    @property
    def disturbed_windows(self) -> int:
        return len(self.windows) - len(self.clean)

    @property
    def disturbed_time(self) -> float | None:
        """The share of the timed wall time that was disturbed (None: not measured)."""
        return disturbed_time(self.disturbance) if self.disturbance else None

    @property
    def used(self) -> list[float]:
        """The windows the median is of: the undisturbed ones, or all when unreliable."""
        return self.clean if self.reliable else list(self.windows)

    @property
    def median(self) -> float:
        used = self.used
        return statistics.median(used) if used else 0.0

    def step_us(self, batch_size: int | None) -> float | None:
        """The median step without the profiler, in microseconds (None without both)."""
        return batch_size * 1e6 / self.median if batch_size and self.median > 0 else None

    @property
    def interval(self) -> Interval | None:
        """The median's confidence interval (order statistics; 95% once there are enough
        windows, else the real confidence of min-max)."""
        return median_interval(self.clean) if self.reliable else None

    @property
    def outliers(self) -> list[int]:
        """Undisturbed windows far from the others (a page-fault storm): kept in the
        median, shown in the report."""
        return outliers(self.clean)

    @property
    def spread(self) -> float:
        """(max - min) / median of the windows used: the measurement's noise."""
        used = self.used
        if len(used) < 2 or self.median <= 0:
            return 0.0
        return (max(used) - min(used)) / self.median

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Throughput":
        return cls(windows=data["windows"], steps_per_window=data["steps_per_window"],
                   profiled=data["profiled"],
                   disturbance=[Disturbance(**d) for d in data.get("disturbance") or []])


# The order categories are shown in: what the model is, then what the step makes.
MEMORY_CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations",
                     "autograd", "temporaries", "inputs", "unknown")


@dataclass
class TensorMemory:
    """Live tensor memory of one profiled step (torch.profiler's memory profile): the
    peak, its breakdown by category, and the total over time by category."""

    peak_b: int
    at_peak_b: dict[str, int]  # category -> bytes at the peak
    timeline_ms: list[float]  # since the step began
    timeline_b: dict[str, list[int]]  # category -> bytes at each time


@dataclass
class Section:
    label: str
    throughput: Throughput | None
    profile: Profile
    memory: dict[str, int | None] = field(default_factory=dict)
    benchmark: list[dict[str, Any]] | None = None  # [{op, cpu_ms, gpu_ms}]
    trace: str | None = None  # file name of the gzipped Chrome trace in the run folder
    # GPU runs: {"tf32": {"matmul", "conv", "override"}, "autocast"}, what was in effect
    precision: dict[str, Any] = field(default_factory=dict)
    # The memory profile of one step, or None (imported profiles, runs stored before it
    # existed); tensor_memory_note says why a new run has none.
    tensor_memory: TensorMemory | None = None
    tensor_memory_note: str | None = None
    # The machine's peaks (reporter.peaks.Peaks.to_dict): a datasheet's, or measured by
    # the run; None for imported profiles and runs stored before it existed.
    peaks: dict[str, Any] | None = None
    # Replacements timed on the device (reporter.collect.whatif), by rule id: {"before_ms",
    # "after_ms", ...} per step.
    whatif: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The disturbance of the profiled steps kept (the least disturbed of the attempts),
    # and how many times they were profiled; None for imported profiles and older runs.
    profile_disturbance: Disturbance | None = None
    profile_attempts: int = 1
    # The disturbance of the timed replacements kept, or of the last attempt when every
    # attempt was disturbed (then ``whatif`` is empty: the estimates stand); None when
    # nothing was timed.
    whatif_disturbance: Disturbance | None = None
    # Why the replacements could not be timed (the error they raised), or None.
    whatif_note: str | None = None
    # The replacements not timed, by rule id: {"need_b", "cap_b"} (their operands would
    # exceed the cap), {"error": "Type: message"} (it raised) or {"exit": code} (the
    # target's code called sys.exit); the run keeps its profile and the estimates stand.
    whatif_failed: dict[str, dict[str, int | str]] = field(default_factory=dict)
    # The profiler's own cost, per step, measured by the runner on as many steps without
    # it just before the profiled ones: {"steps", "unprofiled_step_us", "profiled_step_us",
    # "unprofiled_minor_faults", "profiled_minor_faults", "unprofiled_major_faults",
    # "profiled_major_faults"}; None for imported profiles, distributed and older runs.
    profiler_cost: dict[str, float] | None = None
    # The process state the runner observed around the target's step, and what it set
    # itself (reporter.collect.runner._observe; keys absent when unknown): "grad_enabled"
    # (in the step as the target's own code runs it: for inference, without the runner's
    # inference_mode), "anomaly", "cudnn_benchmark", "deterministic", "default_dtype",
    # "threads", "runner_threads" (set by --threads), "runner_inference_mode",
    # "runner_eval", "training_modules" (modules in training mode as the target handed the
    # model over, where the user's own inference would run them so), "training_layers"
    # (those of them whose forward changes with it: dropout, batch norm), and, for an
    # inference section, one forward run as the user's code runs it: "probe_grad_fn" (its
    # output holds an autograd graph), "probe_saved_b" (bytes of activations the graph
    # saved for backward). Empty for imported profiles and runs stored before it.
    process: dict[str, Any] = field(default_factory=dict)

    @property
    def busy(self) -> bool:
        """Was the machine too busy for this section's figures to be trusted: too few
        undisturbed timed windows, disturbed profiled steps, or timed replacements that
        could not be timed undisturbed? Its throughput, efficiency and the ranking of its
        findings then rest on disturbed numbers."""
        t = self.throughput
        return bool((t is not None and t.windows and not t.reliable)
                    or any(d is not None and d.disturbed
                           for d in (self.profile_disturbance, self.whatif_disturbance)))

    def disturbance_json(self) -> dict[str, Any]:
        """What other work on the machine did to this section's measurements (--json)."""
        t, d = self.throughput, self.profile_disturbance
        return {
            "busy": self.busy,
            "throughput_reliable": t.reliable if t is not None else None,
            "windows": len(t.windows) if t is not None else None,
            "disturbed_windows": t.disturbed_windows if t is not None else None,
            "disturbed_time": t.disturbed_time if t is not None else None,
            "profile_share": d.share if d is not None else None,
            "profile_attempts": self.profile_attempts,
            "whatif_share": (self.whatif_disturbance.share
                             if self.whatif_disturbance is not None else None),
            "peaks_disturbed": bool(self.peaks and self.peaks.get("disturbed")),
        }

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["profile"] = self.profile.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Section":
        return cls(
            label=data["label"],
            throughput=(Throughput.from_dict(data["throughput"])
                        if data.get("throughput") is not None else None),
            profile=Profile.from_dict(data["profile"]),
            memory=dict(data.get("memory") or {}),
            benchmark=data.get("benchmark"),
            trace=data.get("trace"),
            precision=dict(data.get("precision") or {}),
            tensor_memory=(TensorMemory(**data["tensor_memory"])
                           if isinstance(data.get("tensor_memory"), dict) else None),
            tensor_memory_note=data.get("tensor_memory_note"),
            peaks=data.get("peaks") if isinstance(data.get("peaks"), dict) else None,
            whatif=dict(data.get("whatif") or {}),
            profile_disturbance=(Disturbance(**data["profile_disturbance"])
                                 if isinstance(data.get("profile_disturbance"), dict)
                                 else None),
            profile_attempts=data.get("profile_attempts", 1),
            whatif_disturbance=(Disturbance(**data["whatif_disturbance"])
                                if isinstance(data.get("whatif_disturbance"), dict)
                                else None),
            whatif_note=data.get("whatif_note"),
            whatif_failed=(dict(data["whatif_failed"])
                           if isinstance(data.get("whatif_failed"), dict) else {}),
            profiler_cost=(dict(data["profiler_cost"])
                           if isinstance(data.get("profiler_cost"), dict) else None),
            # a malformed value is kept as it is, for reporter.store to refuse in one line
            process=data.get("process", {}) if data.get("process") is not None else {},
        )


@dataclass
class Run:
    id: str
    created: str  # ISO 8601, UTC
    device: str  # "cpu" or "cuda"
    target: dict[str, Any]  # name, spec, preset, batch_size, builtin
    env: dict[str, Any]
    sections: list[Section]
    # A distributed run: one entry per rank, {"rank", "status" ("ok", "failed",
    # "missing"), "error", "sections"}; rank 0's sections are the run's own.
    ranks: list[dict[str, Any]] | None = None

    def sections_of_rank(self, entry: dict[str, Any]) -> list[Section]:
        """The sections a rank profiled (an entry of ``ranks``): the run's own for the
        main rank (the one the report shows), else those stored with the entry (none for
        a rank that failed or did not answer)."""
        return self.sections if entry.get("main") else list(entry.get("sections") or [])

    def to_dict(self) -> dict[str, Any]:
        data = {"id": self.id, "created": self.created, "device": self.device,
                "target": self.target, "env": self.env,
                "sections": [s.to_dict() for s in self.sections]}
        if self.ranks is not None:
            data["ranks"] = [{**r, "sections": [s.to_dict() for s in r["sections"]]}
                             if r.get("sections") else r for r in self.ranks]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Run":
        ranks = data.get("ranks")
        if ranks is not None:
            ranks = [{**r, "sections": [Section.from_dict(s) for s in r["sections"]]}
                     if r.get("sections") else dict(r) for r in ranks]
        return cls(id=data["id"], created=data["created"], device=data["device"],
                   target=dict(data["target"]), env=dict(data["env"]),
                   sections=[Section.from_dict(s) for s in data["sections"]], ranks=ranks)
