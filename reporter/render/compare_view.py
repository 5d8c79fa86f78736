"""The comparison's view model: everything compare.md.j2 prints, formatted for one
locale, from reporter.compare's comparison of runs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from ..analyze.analyzer import Analysis
from ..analyze.breakdown import DEVICE_ACTIVITIES, HOST_PHASES
from ..model.run import Section
from . import markup
from .choices import ModeChoices
from .fmt import Fmt, check_language, md_name
from .finding_view import _finding_view
from .report_view import Row, device_words


@dataclass
class ModeView:
    """One mode of a comparison: its steps side by side."""

    mode: str | None
    title: str
    rows: list[Row]
    verdict: str  # faster, slower, noise, busy (either side disturbed) or unknown
    busy_runs: list[int]  # the numbers (#) of the first and last runs that were disturbed
    speedup: str
    change: str
    change_abs: str
    noise: str | None
    ratio_low: str | None
    ratio_high: str | None
    confidence: str | None
    basis: str
    time_unit: str
    runtime: str  # the name of the runtime of the runs' device ("CUDA", "ROCm", "XPU")
    changed: list[Row]
    appeared: list[Row]
    disappeared: list[Row]
    resolved: list[Row]
    new: list[Row]
    kept: list[Row]
    chart_rows: list[tuple[str, Any]]
    breakdown: dict[str, Any] | None
    efficiency: dict[str, Any] | None
    sub: markup.Md
    choices: ModeChoices = field(init=False)  # what the report's choices read

    def __post_init__(self) -> None:
        self.choices = ModeChoices(ratio_low=bool(self.ratio_low),
                                   ratio_high=bool(self.ratio_high),
                                   busy_runs=len(self.busy_runs))


@dataclass
class CompareView:
    """A comparison of runs or profiles, in order."""

    lang: str
    plural: Callable[..., str]
    title: markup.Md
    steps: list[Row]
    modes: list[ModeView]
    multi: bool
    mismatch: dict[str, bool]
    mismatched: list[str]  # what differs between the runs (device, target, batch), in order
    any_mismatch: bool
    marker: str
    created_iso: str
    kind: str = "compare"


def _peak_b(section: Section) -> int | None:
    """The memory a run's mode needs: the allocated peak on a GPU, else its tensors' peak
    (the process's resident set when the run has no memory profile)."""
    m = section.memory or {}
    if m.get("device_allocated_b") is not None:
        return m["device_allocated_b"]
    if section.tensor_memory is not None:
        return section.tensor_memory.peak_b
    return m.get("host_peak_b")


def _breakdown_side_by_side(sections: list[Section], fmt: Fmt) -> dict[str, Any] | None:
    """Mean per step of each phase and activity, one column per step of the comparison;
    None when no step has a breakdown."""
    means = [s.profile.breakdown.means() if s.profile.breakdown else None for s in sections]
    if not any(means):
        return None

    def rows(part: str, order: tuple[str, ...]) -> list[dict[str, Any]]:
        out = []
        for name in order:
            values = [m[part].get(name) if m else None for m in means]
            if any(v for v in values):
                out.append({"name": name, "cells": [fmt.time(v) for v in values]})
        return out

    return {"n": list(range(1, len(sections) + 1)),
            "step": [fmt.time(m["step_us"]) if m else "—" for m in means],
            "host": rows("host_us", HOST_PHASES), "device": rows("device_us", DEVICE_ACTIVITIES)}


def _efficiency_side_by_side(analyses: list[Analysis], fmt: Fmt) -> dict[str, Any] | None:
    """MFU and speed of light, one column per step of the comparison; None when no step
    has them."""
    results = [a.efficiency for a in analyses]
    found = [r if not isinstance(r, str) else None for r in results]
    if not any(found):
        return None
    return {"n": list(range(1, len(analyses) + 1)),
            "mfu": [fmt.fine_pct(e.mfu) if e else "—" for e in found],
            "hfu": [fmt.fine_pct(e.hfu) if e else "—" for e in found],
            "sol": [fmt.time(e.speed_of_light_us) if e else "—" for e in found],
            "sol_share": [fmt.pct(e.speed_of_light_us / e.profiled_step_us)
                          if e and e.profiled_step_us else "—" for e in found]}


def compare_view(comparison: Any, lang: str) -> CompareView:
    """Everything compare.md.j2 prints: steps, throughput with noise, what changed."""
    fmt = Fmt(check_language(lang))
    steps = []
    for i, step in enumerate(comparison.steps, 1):
        run = step.run
        steps.append({"n": i, "name": md_name(step.name), "source": md_name(step.source),
                      "device": (run.env.get("device_name") if run else step.device.upper()),
                      "created": fmt.date(run.created) if run else "—",
                      "batch": fmt.int(step.batch_size) if step.batch_size else "—"})
    modes = []
    for m in comparison.modes:
        # the runtime of the first side with device time (the sides differ: a mismatch)
        runtime = device_words(next((s.profile.device_type for s in m.sections
                                     if s.profile.has_device), None)).runtime
        rows: list[dict[str, Any]] = []
        previous: float | None = None
        for i, (step, s) in enumerate(zip(comparison.steps, m.sections), 1):
            t = s.throughput
            tt = t if t is not None and t.windows else None
            ratio = (tt.median / previous if tt and previous else None)
            rows.append({
                "n": i, "name": md_name(step.name),
                "throughput": fmt.num(tt.median) if tt else "—",
                "interval": ("±" + fmt.fine_pct(tt.interval.half_width(tt.median))
                             if tt and tt.interval else "—"),
                "vs_previous": fmt.num(ratio, 2) if ratio else "—",
                "self_cpu": fmt.time(s.profile.self_cpu_us),
                "self_device": (fmt.time(s.profile.self_device_us)
                                if s.profile.has_device else "—"),
                "peak": fmt.bytes(_peak_b(s)),
            })
            previous = tt.median if tt else None
        p = m.overall
        modes.append(ModeView(
            mode=m.mode if m.mode in ("train", "inference") else None, title=m.mode,
            rows=rows, verdict=p.verdict,
            busy_runs=[n for n, sec in ((1, p.before), (len(m.sections), p.after))
                       if sec.busy],
            speedup=fmt.num(p.speedup, 2) if p.speedup else "—",
            change=fmt.signed_pct(p.speedup - 1) if p.speedup else "—",
            change_abs=fmt.pct(abs(p.speedup - 1)) if p.speedup else "—",
            noise=fmt.pct(p.noise) if p.noise is not None else None,
            ratio_low=fmt.span(p.ratio.low, p.ratio.high, 2)[0] if p.ratio else None,
            ratio_high=fmt.span(p.ratio.low, p.ratio.high, 2)[1] if p.ratio else None,
            confidence=fmt.pct(p.ratio.confidence) if p.ratio else None,
            basis=p.basis, time_unit=runtime if p.basis == "device" else "CPU",
            runtime=runtime,
            changed=[{"name": md_name(c.name), "before": fmt.time(c.before_us),
                      "after": fmt.time(c.after_us),
                      "delta": ("+" if c.delta_us > 0 else "−") + fmt.time(abs(c.delta_us)),
                      "ratio": fmt.num(c.ratio, 2) if c.ratio is not None else "—"}
                     for c in p.changed],
            appeared=[{"name": md_name(c.name), "after": fmt.time(c.after_us)}
                      for c in p.appeared],
            disappeared=[{"name": md_name(c.name), "before": fmt.time(c.before_us)}
                         for c in p.disappeared],
            resolved=[_finding_view(f, fmt) for f in p.resolved],
            new=[_finding_view(f, fmt) for f in p.new],
            kept=[_finding_view(f, fmt) for f in p.kept],
            chart_rows=[(step.name, s.throughput) for step, s in
                        zip(comparison.steps, m.sections) if s.throughput and
                        s.throughput.windows],
            breakdown=_breakdown_side_by_side(m.sections, fmt),
            efficiency=_efficiency_side_by_side(m.analyses, fmt),
            sub=markup.Md("###" if len(comparison.modes) > 1 else "##"),
        ))
    last = comparison.steps[-1].run
    return CompareView(
        lang=lang, plural=fmt.plural, kind="compare",
        title=markup.join((md_name(s.name) for s in comparison.steps), " → "),
        steps=steps, modes=modes, multi=len(modes) > 1,
        mismatch={k: k in comparison.mismatches for k in ("device", "target", "batch")},
        mismatched=[k for k in ("device", "target", "batch") if k in comparison.mismatches],
        any_mismatch=bool(comparison.mismatches),
        marker="compare:" + ",".join(s.name for s in comparison.steps),
        created_iso=(last.created if last else
                     datetime.now(timezone.utc).isoformat(timespec="seconds")),
    )
