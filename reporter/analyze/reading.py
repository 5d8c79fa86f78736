"""The readings a report states besides its findings, as data: what leads the step and
whether the device bounds it, why the device idles, which steps ran long, whether the
kernels are too short for the device, and how the ranks of a distributed run compare.

Every judgement here (a threshold crossed, a cause picked) used to be made while the
report was formatted; the views now only format these records, and each threshold
lives once, here or in the rule it repeats.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..model.profile import Breakdown, Profile
from ..model.run import Run, Section
from .breakdown import HOST_PHASES
from .findings import step_wall_us
from .rules.waits import SHORT_KERNEL_US, mean_kernel_us
from .savings import BUSY

# A profiled step this many times the median (without the runner's drain) is pointed out.
LONG_STEP = 1.5
# The device idles for a reason worth naming when its idle time is over this share.
IDLE_NAMED = 0.05
IDLE_KINDS = ("idle_data", "idle_sync", "idle_latency", "idle_queued", "idle_host")


@dataclass(frozen=True)
class LongStep:
    n: int  # 1-based, in the order profiled
    us: float
    ratio: float  # to the median step


@dataclass(frozen=True)
class StepReading:
    """The step breakdown read: the host phase that leads, unmarked time larger than it,
    the device's idle time and its main cause, and the steps that ran long."""

    step_us: float
    lead: str | None  # the host phase with the most time ("other" left out)
    lead_us: float
    other_us: float | None  # unmarked host time, when it is larger than the lead
    idle_us: float | None  # the device's idle time per step (None: no device)
    idle_reason: str | None  # its largest cause, when idle is over IDLE_NAMED of the step
    # The device works almost the whole step: the host phases only say where the host
    # waits for it (savings.BUSY, the share a saving model also calls device-bound).
    gpu_bound: bool
    gpu_bound_share: float
    comm_hidden: float | None  # share of communication overlapped with compute
    pageable_us: float | None  # copies from pageable memory per step
    long_steps: list[LongStep] = field(default_factory=list)
    long_step_ratio: float = LONG_STEP


def read_step(b: Breakdown | None) -> StepReading | None:
    """The reading of a step breakdown (None without one)."""
    if b is None or not b.steps_us:
        return None
    step = b.mean(b.steps_us)
    host = {k: b.mean(b.host_us.get(k, [])) for k in HOST_PHASES}
    named = {k: v for k, v in host.items() if k != "other" and v > 0 and step
             and v / step >= 0.0005}
    lead = max(named, key=lambda k: named[k]) if named else None
    lead_us = named[lead] if lead else 0.0
    other = host.get("other", 0.0)
    idle_us = idle_reason = comm_hidden = pageable = None
    gpu_bound = False
    if b.device_us:
        idle = {k: b.mean(b.device_us.get(k, [])) for k in IDLE_KINDS}
        idle_us = sum(idle.values())
        if idle_us > IDLE_NAMED * step:
            idle_reason = max(idle, key=lambda k: idle[k])
        gpu_bound = bool(step) and lead is not None and idle_us <= (1 - BUSY) * step
        overlapped = b.mean(b.device_notes_us.get("comm_overlapped", []))
        exposed = b.mean(b.device_us.get("communication", []))
        comm_hidden = overlapped / (overlapped + exposed) if overlapped + exposed > 0 else None
        copy = b.mean(b.device_notes_us.get("copy_pageable", []))
        pageable = copy if copy > 0 else None
    # Long steps, without the runner's wait for the last step's kernels. Not on a
    # GPU-bound step: its host steps are as long as the waits for the device that fall in
    # them (the first waits for nothing, the last for its own kernels), not comparable.
    drain = b.host_us.get("drain") or [0.0] * len(b.steps_us)
    own = [us - d for us, d in zip(b.steps_us, drain)]
    median = sorted(own)[len(own) // 2]
    long_steps = ([LongStep(i, us, us / median) for i, us in enumerate(own, 1)
                   if us >= LONG_STEP * median]
                  if len(own) >= 3 and median > 0 and not gpu_bound else [])
    return StepReading(step, lead, lead_us, other if lead and other > lead_us else None,
                       idle_us, idle_reason, gpu_bound, BUSY, comm_hidden, pageable,
                       long_steps)


def short_kernels_us(profile: Profile) -> float | None:
    """The mean kernel time when it is under the launch-overhead rule's short-kernel
    threshold: the sizes are too small for the device (None otherwise, or on a CPU)."""
    if not profile.has_device:
        return None
    mean = mean_kernel_us(profile)
    return mean if mean is not None and mean < SHORT_KERNEL_US else None


@dataclass(frozen=True)
class RankFigures:
    """One rank of a distributed run, from its own section."""

    throughput: float | None  # median samples/s of its timed windows
    step_us: float | None  # mean profiled step
    comm_share: float | None  # communication over the profiled wall time
    overlap_share: float | None  # of that, overlapped with compute


def rank_figures(section: Section | None) -> RankFigures:
    if section is None:
        return RankFigures(None, None, None, None)
    p, t = section.profile, section.throughput
    wall = step_wall_us(p)
    comm = p.comm_us / wall if p.comm_us is not None and wall else None
    overlap = (p.comm_overlap_us / p.comm_us if comm is not None and p.comm_us
               and p.comm_overlap_us is not None else None)
    return RankFigures(t.median if t and t.windows else None,
                       wall / p.steps if p.steps and wall else None, comm, overlap)


@dataclass(frozen=True)
class RankSpread:
    """The ranks side by side: their summed throughput, the spread of their medians
    (max - min over the median) and the slowest rank."""

    total: float
    spread: float | None
    slowest: int


def rank_spread(throughputs: dict[int, float | None]) -> RankSpread | None:
    timed = {r: v for r, v in throughputs.items() if v}
    if not timed:
        return None
    medians = sorted(timed.values())
    mid = medians[len(medians) // 2]
    return RankSpread(sum(medians), (medians[-1] - medians[0]) / mid if mid else None,
                      min(timed, key=lambda r: timed[r]))


@dataclass(frozen=True)
class RankRow:
    rank: int
    status: str  # ok, failed, missing
    error: str | None
    figures: RankFigures


@dataclass(frozen=True)
class RanksReading:
    """Every rank of a distributed run (or of a folder of per-rank traces), the rank
    whose profile the report shows (``main``), and their spread."""

    rows: list[RankRow]
    main: int
    spread: RankSpread | None


def _reading(rows: list[RankRow], main: int) -> RanksReading:
    return RanksReading(rows, main, rank_spread({r.rank: r.figures.throughput for r in rows}))


def ranks_of_run(run: Run) -> RanksReading | None:
    """The ranks of a stored distributed run (None for a run of one process)."""
    if not run.ranks:
        return None
    rows = [RankRow(r["rank"], r["status"], r.get("error"),
                    rank_figures(next(iter(run.sections_of_rank(r)), None)))
            for r in run.ranks]
    return _reading(rows, next(r["rank"] for r in run.ranks if r.get("main")))


RANK_LABEL = re.compile(r"rank (\d+)")


def ranks_of_profiles(profiles: list[Profile]) -> RanksReading | None:
    """The ranks of per-rank traces read from a folder (labels "rank N"); the first is
    the one the report shows. None unless there are several, all so labelled."""
    said = [RANK_LABEL.fullmatch(p.label) for p in profiles]
    if len(profiles) < 2 or not all(said):
        return None
    rows = [RankRow(int(m.group(1)), "ok", None, rank_figures(Section(p.label, None, p)))
            for m, p in zip(said, profiles) if m]
    return _reading(rows, rows[0].rank)
