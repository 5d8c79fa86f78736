"""Findings from a Profile: small pure rules registered under stable ids.

A rule is ``rule(profile, limits) -> Finding | None``. It returns raw numbers
(which operator, what share of which time, how many calls, how much memory)
and never prose: the explanation and the advice live in
``templates/<lang>/findings/<rule id>.md.j2``. The ids are a public contract
(``--json`` prints them); keep them stable once published.

The registry, ``Finding`` and the helpers rules share are in reporter.analyze.findings
(and re-exported here). To add a rule: write the function in the family module of
reporter.analyze.rules it belongs to, decorate it with ``@rule("my-id", saving=...,
evidence=..., says=..., share=...)`` (its whole story: see findings.Rule), and add
``findings/my-id.md.j2`` and its name in ``terms.j2`` (``rule``) to every language folder
(docs/adding-a-rule.md; tests/test_registry.py and tests/test_i18n.py walk the registry).

``analyze_section`` is the one place a profile is analyzed for a report, ``--json`` or a
comparison: its efficiency, its findings, and what each is worth (an ``Analysis``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..model.finding import Finding, Saving
from ..model.profile import Profile
from ..model.run import Run, Section
from . import rules  # noqa: F401  (the registry is whole: see the package)
from .compiled import Compiled, compiled
from .efficiency import Counts, Efficiency
from .savings import PAGE_B, WRITERS, writers
from .findings import (
    MATMUL_OPS,
    MIN_PROFILE_US,
    RULES,
    SEVERITIES,
    Basis,
    Rule,
    basis,
    dataloader_rows,
    op_evidence,
    operators,
    rule,
    share,
    step_share,
    step_wall_us,
)
from .reading import StepReading, read_step, short_kernels_us
from .roofline import MATRIX_BOUND, NEAR_ROOFLINE
from .stragglers import of_run

__all__ = ["Analysis", "analyze", "analyze_run", "analyze_section", "finding_ids",
           "profiles_json", "NEAR_ROOFLINE", "MATRIX_BOUND",
           # from reporter.analyze.findings, for the modules and tests that import them from here
           "MATMUL_OPS", "MIN_PROFILE_US", "RULES", "SEVERITIES", "Basis", "Finding", "Rule",
           "basis", "dataloader_rows", "op_evidence", "operators", "rule", "share",
           "step_share", "step_wall_us"]

def analyze(profile: Profile, overrides: dict[str, dict[str, float]] | None = None,
            efficiency: Efficiency | str | None = None) -> list[Finding]:
    """Run every rule; most severe and largest first.

    A catch-all finding (``Rule.catch_all``: dominant-operator) is dropped when a more
    specific finding already explains its operators. With the profile's ``efficiency``
    (reporter.analyze.efficiency.Efficiency), the statements (near-roofline: an operator
    that dominates while running near its roofline is no alarm) are made from the rules'
    findings.
    """
    if profile.self_cpu_us + profile.self_device_us < MIN_PROFILE_US:
        return []  # too little was recorded for any share to mean something
    overrides = overrides or {}
    registered = sorted(RULES.values(), key=lambda r: r.order)
    found = []
    for r in registered:
        if r.func is not None:
            finding = r.func(profile, {**r.limits, **overrides.get(r.id, {})})
            if finding is not None:
                if type(finding.evidence) is not r.evidence:
                    raise TypeError(f"rule {r.id!r} returned {type(finding.evidence).__name__}"
                                    f", not its evidence {r.evidence.__name__}")
                found.append(finding)
    found = [f for f in found if not (RULES[f.rule].catch_all and _explained(f, found))]
    if efficiency is not None and not isinstance(efficiency, str):
        for r in registered:
            if r.derive is not None:
                found = r.derive(found, efficiency, {**r.limits, **overrides.get(r.id, {})})
    if compiled(profile) is not None:
        # The model is compiled already: a finding's advice says so instead of "compile it".
        for f in found:
            f.evidence.compiled = True
    for f in found:  # what a total in the evidence is over (the report says "over N steps")
        if f.evidence.steps is None:
            f.evidence.steps = profile.steps
    found.sort(key=lambda f: (SEVERITIES.index(f.severity), -(f.evidence.share or 0.0)))
    return found


def finding_ids() -> tuple[str, ...]:
    """Every id a finding can have: the registered rules' and statements'. Each needs its
    text in every language (findings/<id>.md.j2, and its name in terms.j2)."""
    return tuple(RULES)


@dataclass(frozen=True)
class Analysis:
    """One profile analyzed, as every report and --json shows it: its efficiency (or why
    there is none), its findings (as analyze() returns them), and the findings ranked by
    what each is worth (reporter.analyze.savings): the main problems, then minor ones."""

    efficiency: Efficiency | str
    findings: list[Finding]
    main: list[tuple[Finding, Saving]]
    minor: list[tuple[Finding, Saving]]
    # False when other work on the machine disturbed the section's measurements
    # (run.Section.busy): the operators' times are inflated unevenly, the step and the
    # timed replacements that rank the findings are off, and the findings are
    # candidates, not established.
    established: bool = True
    # What the report states besides the findings (reporter.analyze.reading): the step
    # breakdown read, the mean kernel when kernels are too short for the device, and
    # what torch.compile did (reporter.analyze.compiled).
    reading: StepReading | None = None
    short_kernel_us: float | None = None
    compiled: Compiled | None = None
    # Per-rank profiles side by side (reporter.analyze.stragglers): the ranks' steps, the
    # slowest and its extra time by cause; empty for one process.
    stragglers: dict[str, Any] = field(default_factory=dict)
    # What the step computes where the efficiency is withheld because the machine was
    # busy: FLOPs and bytes are counts from the recorded shapes, which the load does not
    # change (only the rates built on a disturbed time or peak are withheld).
    counts: Counts | None = None


# Page faults under the profiler this many times those without it, and this many more per
# step: every share of the profiled step is distorted, not only the first-touch operators'.
FAULTS_RATIO = 5.0
FAULTS_MORE = 100.0
# The profiled step this much longer than the one timed without the profiler, or its
# faults distorted nothing worth a sentence (cuda-h200-transformer: 490 against 489 ms).
STEP_LONGER = 0.02


def _measured(cost: dict[str, Any], key: str, ceiling: float = 1e12) -> float | None:
    """A number of the runner's measurement (Section.profiler_cost) in [0, ``ceiling``),
    or None: absent, not a number, or out of range (a stored run is input)."""
    try:
        value = float(cost[key])
    except (KeyError, TypeError, ValueError):
        return None
    return value if 0 <= value < ceiling else None


def _faults(cost: dict[str, Any], when: str) -> float | None:
    """The page faults (minor and major) per step ``when`` "profiled" or "unprofiled"."""
    minor, major = _measured(cost, f"{when}_minor_faults"), _measured(cost, f"{when}_major_faults")
    return None if minor is None or major is None else minor + major


def host_faults(cost: dict[str, Any] | None) -> dict[str, float]:
    """The host's page faults per step without the profiler, what one costs (and the
    least it may: a fault on several threads at once) and that step, from the runner's
    measurement (Section.profiler_cost: ``unprofiled_*``, ``fault_us``,
    ``fault_us_low``); empty where it was not measured (older runs, imported profiles).
    With them, the faults the profiler added per step (``added_faults``: 0 under
    ``FAULTS_MORE`` / 10, as ``profiler_distortion`` counts none) and its measured cost per
    recorded call (``call_us``, 0 where not measured), which
    reporter.analyze.savings.first_touch_us reads."""
    if not cost:
        return {}
    faults, fault_us = _faults(cost, "unprofiled"), _measured(cost, "fault_us", 1e4)
    step_us = _measured(cost, "unprofiled_step_us")
    if faults is None or not fault_us or not step_us:
        return {}
    low = _measured(cost, "fault_us_low", 1e4)
    added = (_faults(cost, "profiled") or 0.0) - faults
    return {"faults": faults, "fault_us": fault_us,
            "fault_low_us": low if low and low <= fault_us else fault_us, "step_us": step_us,
            "added_faults": added if added >= FAULTS_MORE / 10 else 0.0,
            "call_us": _measured(cost, "call_us", 1e6) or 0.0,
            "page_b": _measured(cost, "page_b", 1 << 30) or PAGE_B}


def profiler_distortion(findings: list[Finding], cost: dict[str, Any] | None,
                        profile: Profile | None = None, timed_us: float | None = None
                        ) -> None:
    """Say, in the findings whose share it distorts, what the profiler did to the step
    (``cost``: the runner's measurement, Section.profiler_cost): the step's time and page
    faults with and without it, where the profiled step took ``STEP_LONGER`` longer or
    more. A finding of operators that write fresh memory
    (``savings.writers`` of ``profile``, by name alone without it: its named operators or
    its top one) is distorted as soon as the profiler adds faults; every finding is when
    the faults under it are ``FAULTS_RATIO`` times those without it and ``FAULTS_MORE``
    more per step. The runner's measured cost per recorded call goes with them
    (``profiler_call_us``): with it, reporter.analyze.savings tells the profiler's
    per-call cost and the first touch apart. ``timed_us``: the step timed without the
    profiler (the throughput's, where it was quiet), which the report states elsewhere:
    the finding states it too, not the runner's second timing of the same step (T5: 25.5
    and 25.4 ms in one paragraph)."""
    if not cost:
        return
    with_, without = _faults(cost, "profiled"), _faults(cost, "unprofiled")
    step_with = _measured(cost, "profiled_step_us")
    step_without = _measured(cost, "unprofiled_step_us")
    if with_ is None or without is None or step_with is None or step_without is None:
        return
    # the profiler's own cost per recorded call, measured by the runner (newer runs)
    call_us = _measured(cost, "call_us", 1e6) or None
    more = with_ - without
    if more < FAULTS_MORE / 10:
        return  # the profiler added next to no faults
    if step_with < step_without * (1 + STEP_LONGER):
        return  # nor any time the step would show
    everywhere = more >= FAULTS_MORE and with_ >= FAULTS_RATIO * max(without, 1.0)
    fresh = writers(profile) if profile is not None else WRITERS
    for f in findings:
        if f.evidence.unprofiled:
            continue  # measured without the profiler: nothing of it to distort
        names = {*f.ops, str(f.evidence.op or "")}
        first_touch = bool(names & fresh)
        if not (everywhere or first_touch):
            continue
        e = f.evidence
        e.profiled_faults, e.unprofiled_faults = round(with_), round(without)
        e.profiled_faults_step_us = step_with
        e.unprofiled_faults_step_us = timed_us or step_without
        e.first_touch = first_touch
        if call_us is not None:
            e.profiler_call_us = call_us


def whatif_notes(findings: list[Finding], whatif: dict[str, Any] | None) -> None:
    """Add to each finding's evidence what its replacement, timed by the runner
    (Section.whatif), says about the advice (its rule's ``WhatIf.notes``)."""
    for f in findings:
        r = RULES.get(f.rule)
        timed = (whatif or {}).get(f.rule)
        if r is not None and r.whatif is not None and r.whatif.notes is not None \
                and isinstance(timed, dict):
            r.whatif.notes(f, timed)


def analyze_section(section: Section, batch_size: int | None = None,
                    overrides: dict[str, dict[str, float]] | None = None,
                    stragglers: dict[str, Any] | None = None) -> Analysis:
    """The analysis of a run's section (reporter.model.run.Section) or of an imported profile
    wrapped in one: its efficiency with the section's peaks, TF32 state and timed step;
    the findings; their savings, with the replacements timed on the device and the step
    timed without the profiler. The one place a profile is analyzed. ``stragglers``: the
    ranks side by side (stragglers.of_run), else those the profile was read with (a
    folder of per-rank traces)."""
    from .efficiency import BUSY, count, of_section
    from .savings import ranked

    eff = of_section(section, batch_size)
    # What a fix that keeps the work keeps at the least, where the efficiency is not
    # assessed because the machine was busy: the roofline of the peaks calibrated all the
    # same, which other work lowered (first_touch's page faults, 2026-11-29: predicted
    # 100.0% of the step with no floor, against 89-91% saved; 94% with one)
    floor = of_section(section, batch_size, even_if_busy=True) if eff == BUSY else None
    ranks = section.profile.stragglers if stragglers is None else stragglers
    # The rules read the ranks from the profile: a copy carries them, the section's own
    # profile stays as it was read.
    profile = (section.profile if ranks is section.profile.stragglers
               else replace(section.profile, stragglers=ranks))
    t = section.throughput
    # A step timed while the machine was busy is no yardstick: the profiled one is used.
    real_step_us = t.step_us(batch_size) if t is not None and t.reliable else None
    faults = host_faults(getattr(section, "profiler_cost", None))
    if faults:
        # The faults' share is of the step every other share and saving is of: the
        # throughput's where it was timed quietly (the runner's own unprofiled steps,
        # which counted the faults, are a second timing of the same step; the report
        # said 52,471 faults at 1.00 us "account for 43.8 ms", of the other one). On a
        # busy machine every share is of the profiled step, the profiler's added faults
        # included: the step less them (savings.first_touch_us) would be a third one (a
        # loop read 35.5% of that step while its worth was 6.0% of the profiled one)
        profile = replace(profile, host_faults={**faults, "step_us": real_step_us}
                          if real_step_us else {**faults, "added_faults": 0.0})
    if getattr(section, "process", None):
        # what the runner observed of the process around the step (run.Section.process)
        profile = replace(profile, process=dict(section.process))
    findings = analyze(profile, overrides, eff)
    profiler_distortion(findings, getattr(section, "profiler_cost", None), profile,
                        real_step_us)
    whatif_notes(findings, section.whatif)
    main, minor = ranked(findings, profile, eff, section.whatif, real_step_us,
                         floor if isinstance(floor, Efficiency) else None)
    return Analysis(eff, findings, main, minor, established=not section.busy,
                    reading=read_step(section.profile.breakdown),
                    short_kernel_us=short_kernels_us(section.profile),
                    compiled=compiled(section.profile), stragglers=ranks,
                    counts=count(section.profile) if eff == BUSY else None)


def analyze_run(run: Run) -> list[Analysis]:
    """analyze_section of each section of a run (reporter.model.run.Run), with its batch
    size; a distributed run's ranks side by side (stragglers.of_run)."""
    ranks = of_run(run)
    return [analyze_section(s, run.target.get("batch_size"),
                            stragglers=ranks[i] if ranks is not None else None)
            for i, s in enumerate(run.sections)]


def _explained(catch_all: Finding, found: list[Finding]) -> bool:
    """Does a more specific finding already account for the catch-all's operators? Either
    it names them, or its rule says it explains them (``Rule.explains``)."""
    for f in found:
        if f is catch_all:
            continue
        if set(catch_all.ops) <= set(f.ops):
            return True
        explains = RULES[f.rule].explains
        if explains is not None and explains(f, catch_all):
            return True
    return False


def profiles_json(profiles: list[Profile], analyses: list[Analysis],
                  memory: list[dict[str, Any]] | None = None,
                  disturbance: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``--json`` document: times in microseconds, memory in bytes, findings by rule id.

    ``breakdown`` is the step breakdown (null for tables); ``analyses``, each profile's
    (analyze_section); ``memory``, given for a stored run's sections, adds each one's
    memory figures and memory profile; ``disturbance``, given for them too, what other
    work on the machine did to each one's measurements (run.Section.disturbance_json).
    Findings come by estimated saving (reporter.analyze.savings), with ``saving_ms`` and
    its band, and ``established``: false when the machine was busy (run.Section.busy)."""
    from dataclasses import asdict

    from .efficiency import to_json

    out = []
    for i, (p, analysis) in enumerate(zip(profiles, analyses, strict=True)):
        ops = []
        for o in p.ops:
            row = asdict(o)
            if row.get("input_shapes") is None:
                row.pop("input_shapes", None)
            ops.append(row)
        eff, main, minor = analysis.efficiency, analysis.main, analysis.minor
        doc = {"label": p.label, "device_type": p.device_type, "totals": p.totals(),
               "breakdown": asdict(p.breakdown) if p.breakdown else None,
               # per-rank traces: the ranks' steps, the slowest and its extra time by cause
               "stragglers": analysis.stragglers or None,
               "efficiency": to_json(eff, analysis.counts), "ops": ops,
               # By estimated saving; "minor": worth under 3% of the step.
               "findings": [{**f.to_dict(), **s.to_json(), "minor": is_minor,
                             "established": analysis.established}
                            for group, is_minor in ((main, False), (minor, True))
                            for f, s in group]}
        if memory is not None:
            doc["memory"] = memory[i]
        if disturbance is not None:
            doc["disturbance"] = disturbance[i]
        out.append(doc)
    return {"profiles": out}

