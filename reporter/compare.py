"""Before and after: compare stored runs (or anything analyze reads) in order.

``compare(inputs)`` lines the inputs up as steps (BASE, NEW, or a longer
sequence), pairs their sections by mode ("train", "inference"; imported
profiles by position) and computes what changed: throughput with its noise,
time totals, peak memory, the operators whose time changed most, and the
findings resolved and new. Everything is raw numbers; ``compare_view``
formats it for a language.

Noise: a run's relative spread is (max - min) / median of its timed windows.
A throughput difference within half the larger spread of the two runs is
called noise, not a change; ``--fail-if-slower`` gates only differences
beyond it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .analyze.analyzer import Analysis, analyze_section
from .errors import BadInput
from .model.finding import Finding
from .model.profile import KIND_KERNEL, Profile
from .model.run import Run, Section
from .model.stats import Interval


@dataclass
class Step:
    """One input of a comparison: a stored run, or profiles read from a file."""

    name: str  # how the report names it: the target, or the file
    source: str  # run id or path
    sections: list[Section]
    run: Run | None = None

    @property
    def device(self) -> str:
        if self.run is not None:
            return self.run.device.split(":")[0]  # "cuda:0" of a distributed run is cuda
        return "cuda" if any(s.profile.has_device for s in self.sections) else "cpu"

    @property
    def batch_size(self) -> int | None:
        return self.run.target.get("batch_size") if self.run else None


@dataclass
class OpChange:
    name: str
    before_us: float
    after_us: float

    @property
    def delta_us(self) -> float:
        return self.after_us - self.before_us

    @property
    def ratio(self) -> float | None:
        return self.after_us / self.before_us if self.before_us > 0 else None


@dataclass
class Pair:
    """Two consecutive steps of one mode."""

    before: Section
    after: Section
    speedup: float | None  # after / before throughput (medians of the timed windows)
    noise: float | None  # half the larger relative spread of the two runs' windows
    # The speed-up's interval: the after interval over the before one (None without
    # intervals); its confidence is at least the product of the two.
    ratio: Interval | None
    basis: str  # "device" or "cpu": which self time the operator changes are of
    changed: list[OpChange]
    appeared: list[OpChange]
    disappeared: list[OpChange]
    resolved: list[Finding]
    new: list[Finding]
    kept: list[Finding]

    @property
    def busy(self) -> bool:
        """Other work on the machine disturbed either side: no verdict can be drawn."""
        return self.before.busy or self.after.busy

    @property
    def within_noise(self) -> bool:
        """No change that the measurements can tell: the speed-up's interval holds 1 (or,
        without intervals, the speed-up is within half the larger spread)."""
        if self.speedup is None:
            return False
        if self.ratio is not None:
            return self.ratio.low <= 1.0 <= self.ratio.high
        return self.noise is not None and abs(self.speedup - 1.0) <= self.noise

    @property
    def verdict(self) -> str:
        """faster, slower, noise (no change the measurements can tell), busy (either side
        disturbed: no verdict) or unknown (no throughput on a side)."""
        if self.speedup is None:
            return "unknown"
        if self.busy:
            return "busy"
        if self.within_noise:
            return "noise"
        return "faster" if self.speedup > 1 else "slower"


@dataclass
class ModeComparison:
    mode: str
    sections: list[Section]
    pairs: list[Pair]  # consecutive pairs; the first-to-last pair is ``overall``
    overall: Pair
    analyses: list[Analysis]  # each section's, in order: its efficiency, its findings


@dataclass
class Comparison:
    steps: list[Step]
    modes: list[ModeComparison]
    mismatches: list[str] = field(default_factory=list)  # "device", "target", "batch"


def load_step(arg: str, runs_root: Path, workers: int | None = None,
              scheduler: str | None = None) -> Step:
    """A comparison input: a run (folder, run.json, id, 'latest'), a table or trace file,
    or a folder of per-rank traces (its ranks read as analyze reads them: in ``workers``
    processes or on a Dask ``scheduler``, inputs.read_sections)."""
    from .inputs import run_folder

    return step_of(arg, run_folder(arg, runs_root), workers, scheduler)


def step_of(arg: str, folder: Path | None, workers: int | None = None,
            scheduler: str | None = None) -> Step:
    """The input ``arg`` as a step: the run stored in ``folder`` (inputs.run_folder's
    answer for ``arg``), or, when None, what inputs.read_sections reads from ``arg``."""
    from .inputs import load_run, read_sections

    if folder is not None:
        run = load_run(folder)
        return Step(name=run.target.get("name") or run.id, source=run.id,
                    sections=run.sections, run=run)
    path = Path(arg)
    return Step(name=path.name, source=str(path),
                sections=read_sections(path, workers, scheduler))


def _self_times(profile: Profile, basis: str) -> dict[str, float]:
    attr = "self_device_us" if basis == "device" else "self_cpu_us"
    kinds = ("op", "dataloader") if basis == "device" else ("op", "dataloader", "runtime")
    out: dict[str, float] = {}
    for o in profile.ops:
        if o.kind in kinds and o.kind != KIND_KERNEL:
            out[o.name] = out.get(o.name, 0.0) + getattr(o, attr)
    return out


def _noise(section: Section) -> float | None:
    t = section.throughput
    return t.spread if t is not None and len(t.windows) >= 2 else None


def _ratio(before: Interval | None, after: Interval | None) -> Interval | None:
    if before is None or after is None or before.low <= 0 or before.high <= 0:
        return None
    return Interval(after.low / before.high, after.high / before.low,
                    before.confidence * after.confidence)


def compare_pair(before: Section, after: Section, analysed: tuple[Analysis, Analysis],
                 top: int = 10) -> Pair:
    """Two steps of one mode: speed-up, operators changed, findings resolved, new, kept
    (``analysed``: each one's analyze_section)."""
    tb, ta = before.throughput, after.throughput
    speedup = ta.median / tb.median if tb and ta and tb.median > 0 and ta.median > 0 else None
    spreads = [n for n in (_noise(before), _noise(after)) if n is not None]
    noise = max(spreads) / 2 if len(spreads) == 2 else None
    ratio = _ratio(tb.interval if tb else None, ta.interval if ta else None)
    basis = "device" if before.profile.has_device and after.profile.has_device else "cpu"
    b, a = _self_times(before.profile, basis), _self_times(after.profile, basis)
    both = [OpChange(n, b[n], a[n]) for n in b.keys() & a.keys()]
    changed = sorted((c for c in both if c.delta_us != 0), key=lambda c: abs(c.delta_us),
                     reverse=True)[:top]
    appeared = sorted((OpChange(n, 0.0, a[n]) for n in a.keys() - b.keys() if a[n] > 0),
                      key=lambda c: c.after_us, reverse=True)[:top]
    disappeared = sorted((OpChange(n, b[n], 0.0) for n in b.keys() - a.keys() if b[n] > 0),
                         key=lambda c: c.before_us, reverse=True)[:top]
    fb, fa = analysed[0].findings, analysed[1].findings
    rules_b, rules_a = {f.rule for f in fb}, {f.rule for f in fa}
    return Pair(before, after, speedup, noise, ratio, basis, changed, appeared, disappeared,
                resolved=[f for f in fb if f.rule not in rules_a],
                new=[f for f in fa if f.rule not in rules_b],
                kept=[f for f in fa if f.rule in rules_b])


def compare(steps: list[Step]) -> Comparison:
    if len(steps) < 2:
        raise BadInput("compare needs at least two inputs (BASE NEW)", error_id="usage")
    modes: list[ModeComparison] = []
    labels = [s.label for s in steps[0].sections]
    for i, label in enumerate(labels):
        sections = []
        for step in steps:
            match = next((s for s in step.sections if s.label == label), None)
            if match is None and i < len(step.sections) and step.run is None:
                match = step.sections[i]  # imported profiles pair by position
            if match is None:
                break
            sections.append(match)
        if len(sections) != len(steps):
            continue
        analyses = [analyze_section(s, step.batch_size) for s, step in zip(sections, steps)]
        pairs = [compare_pair(x, y, (ax, ay)) for x, y, ax, ay
                 in zip(sections, sections[1:], analyses, analyses[1:])]
        overall = (pairs[0] if len(pairs) == 1 else
                   compare_pair(sections[0], sections[-1], (analyses[0], analyses[-1])))
        modes.append(ModeComparison(label, sections, pairs, overall, analyses))
    if not modes:
        raise BadInput("the inputs have no profiled mode in common (train, inference, ...)",
                       error_id="bad-input")
    mismatches = []
    if len({s.device for s in steps}) > 1:
        mismatches.append("device")
    if len({s.name.removesuffix("-fixed") for s in steps}) > 1:  # a fix is the same workload
        mismatches.append("target")
    if len({s.batch_size for s in steps if s.batch_size}) > 1:
        mismatches.append("batch")
    return Comparison(steps, modes, mismatches)


def busy(comparison: Comparison) -> list[str]:
    """The runs (by name and mode) whose measurements other work on the machine
    disturbed, among the first and last of each mode: the gate cannot judge them. For a
    message: each name one line, with no workflow command in it (``markup.log``)."""
    from .render.markup import log

    out = []
    for m in comparison.modes:
        for step, section in ((comparison.steps[0], m.overall.before),
                              (comparison.steps[-1], m.overall.after)):
            if section.busy:
                name = f"{log(step.name)} ({log(m.mode)})"
                if name not in out:
                    out.append(name)
    return out


def regression(comparison: Comparison, max_slowdown_pct: float) -> tuple[bool, list[str]]:
    """Is the last step more than ``max_slowdown_pct`` % slower than the first, beyond noise?
    Each reason is one line for the gate's message: a section's label comes from the run,
    so it is printed as ``markup.log`` makes it (no line break, no workflow command)."""
    from .render.markup import log

    failed, why = False, []
    for m in comparison.modes:
        p = m.overall
        mode = log(m.mode)
        if p.speedup is None:
            why.append(f"{mode}: no throughput to compare")
            continue
        drop = (1.0 - p.speedup) * 100.0
        limit = 1.0 - max_slowdown_pct / 100.0
        if p.ratio is not None:  # slower than the limit even at the interval's best end
            if p.ratio.high < limit:
                failed = True
                why.append(f"{mode}: {drop:.1f}% slower than the base (limit "
                           f"{max_slowdown_pct:g}%; the speed-up lies in {p.ratio.low:.3f}-"
                           f"{p.ratio.high:.3f} with {p.ratio.confidence:.0%} confidence)")
        elif drop > max_slowdown_pct and not p.within_noise:
            failed = True
            why.append(f"{mode}: {drop:.1f}% slower than the base (limit {max_slowdown_pct:g}%, "
                       f"noise ±{(p.noise or 0) * 100:.1f}%)")
    return failed, why


def _efficiency(section: Any, step: Any) -> dict[str, Any]:
    from .analyze.efficiency import of_section, to_json

    doc = to_json(of_section(section, step.batch_size))
    doc.pop("ops", None)  # the per-step figures; each report has the operators
    return doc


def compare_json(comparison: Comparison) -> dict[str, Any]:
    modes = []
    for m in comparison.modes:
        p = m.overall
        modes.append({
            "mode": m.mode,
            "throughput": [s.throughput.median if s.throughput else None for s in m.sections],
            "speedup": p.speedup, "noise": p.noise, "within_noise": p.within_noise,
            # Either side disturbed by other work on the machine: no verdict.
            "busy": p.busy,
            "speedup_interval": ([p.ratio.low, p.ratio.high, p.ratio.confidence]
                                 if p.ratio else None),
            "basis": p.basis,
            "changed": [{"name": c.name, "before_us": c.before_us, "after_us": c.after_us}
                        for c in p.changed],
            "appeared": [c.name for c in p.appeared],
            "disappeared": [c.name for c in p.disappeared],
            "resolved": [f.rule for f in p.resolved], "new": [f.rule for f in p.new],
            # Mean per step of each host phase and device activity, per step of the
            # comparison (null where a step has no breakdown: a table, an old run).
            "breakdown": [s.profile.breakdown.means() if s.profile.breakdown else None
                          for s in m.sections],
            # MFU and speed of light per step (reporter.efficiency.to_json, or its note).
            "efficiency": [_efficiency(s, step) for s, step in zip(m.sections, comparison.steps)],
        })
    return {"steps": [{"name": s.name, "source": s.source, "device": s.device}
                      for s in comparison.steps],
            "mismatches": comparison.mismatches, "modes": modes}
