"""Stragglers across ranks: which rank's step is longest, by how much, and on what.

Read from the step breakdowns of per-rank traces (a folder of them, or the ranks of a
stored ``--nproc`` run: ``of_run``): each rank's mean step and its device time by cause,
whose parts sum to the step (reporter.analyze.breakdown): compute (kernels, copies,
sets), communication not hidden by compute, the host not feeding the device (idle with
nothing launched, in data loading or in a synchronisation) and waiting with work queued
(on a dependency or an event, the launch latency). Ranks without a device (gloo on the
CPU) have no device time: their step splits into communication not hidden by other
work (the trace's collective time less its overlap with the operators, per step), data
loading (the host phase) and compute (the rest), and no queued waits. The slowest
rank's extra time over the median of the others, cause by cause, says what holds it
back; in a collective the others wait for it, so their communication grows, not its own.
"""

from __future__ import annotations

from dataclasses import replace
from statistics import median
from typing import Any

from ..model.profile import Profile
from ..model.run import Run, Section

CAUSES: dict[str, tuple[str, ...]] = {
    "compute": ("compute", "copy_h2d", "copy_d2h", "copy_d2d", "memset"),
    "communication": ("communication",),
    "host": ("idle_host", "idle_data", "idle_sync"),
    "waiting": ("idle_latency", "idle_queued"),
}


def stragglers(profiles: list[Profile]) -> dict[str, Any]:
    """Per rank (profiles with a GPU step breakdown) its mean step and time per cause,
    per step, in us; the slowest rank, its extra time over the others' median step (and
    that share of it), the extra per cause (the rank's time less the others' median) and
    the cause with the most. Empty with fewer than two such ranks."""
    timed = [p for p in profiles if p.breakdown is not None and p.breakdown.steps_us]
    device = bool(timed) and all(p.breakdown.device_us for p in timed if p.breakdown)
    rows: list[dict[str, Any]] = []
    for p in timed:
        b = p.breakdown
        assert b is not None
        step = b.mean(b.steps_us)
        row = {"rank": p.label, "steps": len(b.steps_us), "step_us": step}
        if device:
            row.update({cause: sum(b.mean(b.device_us.get(k, [])) for k in keys)
                        for cause, keys in CAUSES.items()})
        else:
            exposed = max(0.0, (p.comm_us or 0.0) - (p.comm_overlap_us or 0.0))
            comm = min(step, exposed / len(b.steps_us))
            data = min(step - comm, b.mean(b.host_us.get("data", []))
                       + b.mean(b.host_us.get("input_copy", [])))
            row.update(compute=step - comm - data, communication=comm, host=data, waiting=0.0)
        rows.append(row)
    if len(rows) < 2:
        return {}
    slow = max(rows, key=lambda r: r["step_us"])
    others = [r for r in rows if r is not slow]
    reference = median(r["step_us"] for r in others)
    extra = {cause: slow[cause] - median(r[cause] for r in others) for cause in CAUSES}
    return {"ranks": rows, "device": device, "slowest": slow["rank"],
            "slowest_step_us": slow["step_us"],
            "reference_step_us": reference, "extra_us": slow["step_us"] - reference,
            "extra_share": (slow["step_us"] - reference) / reference if reference else 0.0,
            "extra_by_cause_us": extra, "cause": max(extra, key=lambda k: extra[k])}


def of_run(run: Run) -> list[dict[str, Any]] | None:
    """The stragglers of a stored distributed run (reporter.model.run.Run with ``ranks``),
    one per section, in order: every rank's profile of that section (matched by label)
    side by side. None for a run of one rank. The run is not changed: the analysis
    carries them (analyzer.Analysis.stragglers)."""
    if not run.ranks or len(run.ranks) < 2:
        return None
    found: list[dict[str, Any]] = []
    for section in run.sections:
        profiles = []
        for entry in sorted(run.ranks, key=lambda r: r["rank"]):
            mine: Section | None = next((s for s in run.sections_of_rank(entry)
                                         if s.label == section.label), None)
            if mine is not None and mine.profile is not None:
                profiles.append(replace(mine.profile, label=f"rank {entry['rank']}"))
        found.append(stragglers(profiles))
    return found
