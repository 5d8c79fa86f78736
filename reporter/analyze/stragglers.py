"""Stragglers across ranks: which rank's step is longest, by how much, and on what.

Read from the step breakdowns of per-rank traces (a folder of them): each rank's mean
step and its device time by cause, whose parts sum to the step (reporter.analyze.
breakdown): compute (kernels, copies, sets), communication not hidden by compute, the
host not feeding the device (idle with nothing launched, in data loading or in a
synchronisation) and waiting with work queued (on a dependency or an event, the launch
latency). The slowest rank's extra time over the median of the others, cause by cause,
says what holds it back; in a collective the others wait for it, so their communication
grows, not its own.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from ..model.profile import Profile

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
    rows: list[dict[str, Any]] = []
    for p in profiles:
        b = p.breakdown
        if b is None or not b.steps_us or not b.device_us:
            continue
        rows.append({"rank": p.label, "steps": len(b.steps_us), "step_us": b.mean(b.steps_us),
                     **{cause: sum(b.mean(b.device_us.get(k, [])) for k in keys)
                        for cause, keys in CAUSES.items()}})
    if len(rows) < 2:
        return {}
    slow = max(rows, key=lambda r: r["step_us"])
    others = [r for r in rows if r is not slow]
    reference = median(r["step_us"] for r in others)
    extra = {cause: slow[cause] - median(r[cause] for r in others) for cause in CAUSES}
    return {"ranks": rows, "slowest": slow["rank"], "slowest_step_us": slow["step_us"],
            "reference_step_us": reference, "extra_us": slow["step_us"] - reference,
            "extra_share": (slow["step_us"] - reference) / reference if reference else 0.0,
            "extra_by_cause_us": extra, "cause": max(extra, key=lambda k: extra[k])}
