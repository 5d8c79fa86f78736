"""Findings from a Profile: small pure rules registered under stable ids.

A rule is ``rule(profile, limits) -> Finding | None``. It returns raw numbers
(which operator, what share of which time, how many calls, how much memory)
and never prose: the explanation and the advice live in
``templates/<lang>/findings/<rule id>.md.j2``. The ids are a public contract
(``--json`` prints them); keep them stable once published.

The registry, ``Finding`` and the helpers rules share are in reporter.analyze.findings
(and re-exported here). To add a rule: write the function in reporter.analyze.rules (or
in any module it imports), decorate it with ``@rule("my-id", threshold=...)``, and add
``findings/my-id.md.j2`` and its name in ``terms.j2`` (``rule``) to every language folder
(tests/test_i18n.py walks the registry).

``analyze_section`` is the one place a profile is analyzed for a report, ``--json`` or a
comparison: its efficiency, its findings, and what each is worth (an ``Analysis``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import rules  # noqa: F401  (registers the built-in rules)
from .efficiency import Efficiency
from .findings import (
    MATMUL_OPS,
    MIN_PROFILE_US,
    RULES,
    SEVERITIES,
    Basis,
    Finding,
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
from .profile import Profile
from .savings import Saving

__all__ = ["Analysis", "analyze", "analyze_run", "analyze_section", "finding_ids",
           "profiles_json", "NEAR_ROOFLINE", "MATRIX_BOUND",
           # from reporter.analyze.findings, for the modules and tests that import them from here
           "MATMUL_OPS", "MIN_PROFILE_US", "RULES", "SEVERITIES", "Basis", "Finding", "Rule",
           "basis", "dataloader_rows", "op_evidence", "operators", "rule", "share",
           "step_share", "step_wall_us"]

def analyze(profile: Profile, overrides: dict[str, dict[str, float]] | None = None,
            efficiency: Any = None) -> list[Finding]:
    """Run every rule; most severe and largest first.

    ``dominant-operator`` is dropped when a more specific finding already
    explains its operator. With the profile's ``efficiency``
    (reporter.efficiency.Efficiency), an operator that dominates while running near
    its roofline is no alarm: ``near-roofline`` says so, with the levers left.
    """
    if profile.self_cpu_us + profile.self_device_us < MIN_PROFILE_US:
        return []  # too little was recorded for any share to mean something
    overrides = overrides or {}
    found = []
    for r in sorted(RULES.values(), key=lambda r: r.order):
        limits = {**r.limits, **overrides.get(r.id, {})}
        finding = r.func(profile, limits)
        if finding is not None:
            found.append(finding)
    found = [f for f in found if not (f.rule == "dominant-operator" and _explained(f, found))]
    if efficiency is not None and not isinstance(efficiency, str):
        kept = [_near_roofline(f, efficiency, overrides.get("near-roofline", {}))
                if f.rule == "dominant-operator" else f for f in found]
        found = [f for f in kept if f is not None]
        if not any(f.rule in ("near-roofline", "dominant-operator", "fp32-gemm")
                   for f in found):
            bound = _matrix_bound(efficiency, overrides.get("near-roofline", {}))
            if bound is not None:
                found.append(bound)
    found.sort(key=lambda f: (SEVERITIES.index(f.severity), -f.evidence.get("share", 0.0)))
    return found


# An operator at this share of its roofline or more runs as well as can be expected.
NEAR_ROOFLINE = 0.5
# Findings the analyzer makes itself, from the rules' findings and the efficiency.
ANALYZER_FINDINGS = ("near-roofline",)


def finding_ids() -> tuple[str, ...]:
    """Every id a finding can have: the registered rules', then the analyzer's own. Each
    needs its text in every language (findings/<id>.md.j2, and its name in terms.j2)."""
    return (*RULES, *ANALYZER_FINDINGS)


def _near_roofline(dominant: Finding, efficiency: Any, limits: dict[str, float]
                   ) -> Finding | None:
    """A dominant matrix operator that runs near its roofline: not a problem but the
    step's shape. Its lever: a dtype with a higher peak on this machine, worth the
    operator's time x (1 - its peak / the faster one) per step, if any."""
    row = next((o for o in efficiency.ops if o.name == dominant.evidence["op"]), None)
    if row is None or not row.matrix or row.bound != "compute" or \
            row.roofline_share < limits.get("roofline", NEAR_ROOFLINE):
        return dominant
    return Finding("near-roofline", "low", {
        **{k: v for k, v in dominant.evidence.items() if k != "threshold"},
        "products": 0,  # one operator (see _matrix_bound for several)
        "roofline_share": row.roofline_share, "achieved_fps": row.achieved_flops,
        **_lever(efficiency, row.dtypes, row.time_us),
    }, ops=dominant.ops)


# The dtypes a lever may name: what torch.autocast (bf16, fp16) and the TF32 switch reach.
# fp8 products need Transformer Engine or torch._scaled_mm, not a switch: never a lever.
LEVER_DTYPES = ("tf32", "bf16", "fp16")


def _lever(efficiency: Any, dtypes: list[str], time_us: float) -> dict[str, Any]:
    """The near-roofline lever: the peak of ``dtypes`` (the products' own), the dtype with
    the highest peak above it on this machine (fp32 aside), and what ``time_us`` of
    products would save at that peak, per step."""
    peaks = efficiency.peaks.flops
    # fp32 products ran at the TF32 peak when TF32 was on (the step's peak dtype says so)
    keys = ["tf32" if d == "fp32" and efficiency.peak_dtype == "tf32" else d for d in dtypes]
    current = max((peaks.get(k, 0.0) for k in keys), default=0.0) or efficiency.peak_flops
    faster = max(((k, v) for k, v in peaks.items() if k in LEVER_DTYPES and v > current * 1.1),
                 key=lambda kv: kv[1], default=None)
    saving = time_us * (1 - current / faster[1]) if faster else None
    step = efficiency.profiled_step_us
    return {"peak_fps": current, "dtype": ", ".join(dtypes), "source": efficiency.peaks.source,
            "faster_dtype": faster[0] if faster else None,
            "faster_fps": faster[1] if faster else None,
            "saving_us": saving, "saving_share": saving / step if saving and step else None}


# Matrix products holding this share of the operators' time together bound the step.
MATRIX_BOUND = 0.5


def _matrix_bound(efficiency: Any, limits: dict[str, float]) -> Finding | None:
    """A step bound by matrix products that no single one dominates (a ViT, say), all
    running near their roofline: the same statement as for one dominant product, for
    them together, with the lever a faster dtype would give them."""
    rows = [o for o in efficiency.ops if o.matrix and o.bound == "compute" and o.time_us > 0]
    time_us = sum(o.time_us for o in rows)
    if not rows or not efficiency.total_us or \
            time_us / efficiency.total_us < limits.get("share", MATRIX_BOUND):
        return None
    roofline = sum(min(o.roof_us, o.time_us) for o in rows) / time_us
    if roofline < limits.get("roofline", NEAR_ROOFLINE):
        return None
    flops = sum(o.flops for o in rows)
    return Finding("near-roofline", "low", {
        "basis": efficiency.basis, "share": time_us / efficiency.total_us,
        "op": rows[0].name, "op_share": time_us / efficiency.total_us,
        "others": [o.name for o in rows[1:5]], "products": len(rows),
        "roofline_share": roofline, "achieved_fps": flops / time_us * 1e6,
        **_lever(efficiency, sorted({d for o in rows for d in o.dtypes}), time_us),
    }, ops=[o.name for o in rows])


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


def analyze_section(section: Any, batch_size: int | None = None,
                    overrides: dict[str, dict[str, float]] | None = None) -> Analysis:
    """The analysis of a run's section (reporter.run.Section) or of an imported profile
    wrapped in one: its efficiency with the section's peaks, TF32 state and timed step;
    the findings; their savings, with the replacements timed on the device and the step
    timed without the profiler. The one place a profile is analyzed."""
    from .efficiency import of_section
    from .savings import ranked

    eff = of_section(section, batch_size)
    findings = analyze(section.profile, overrides, eff)
    t = section.throughput
    # A step timed while the machine was busy is no yardstick: the profiled one is used.
    real_step_us = t.step_us(batch_size) if t is not None and t.reliable else None
    main, minor = ranked(findings, section.profile, eff, section.whatif, real_step_us)
    return Analysis(eff, findings, main, minor,
                    established=not getattr(section, "busy", False))


def analyze_run(run: Any) -> list[Analysis]:
    """analyze_section of each section of a run (reporter.run.Run), with its batch size."""
    return [analyze_section(s, run.target.get("batch_size")) for s in run.sections]


def _explained(dominant: Finding, found: list[Finding]) -> bool:
    """Does a more specific finding already account for the dominant operator?

    Either it names the operator, or the input pipeline is waited on for longer
    than the operator runs (work done inside ``enumerate(DataLoader)``, such as a
    per-sample transform, shows up as ordinary operators).
    """
    for f in found:
        if f is dominant:
            continue
        if set(dominant.ops) <= set(f.ops):
            return True
        if (f.rule == "dataloader-bound"
                and f.evidence.get("op_time_us", 0) >= dominant.evidence.get("op_time_us", 0)):
            return True
        if f.rule == "fp32-gemm" and dominant.ops[0] in MATMUL_OPS:
            return True  # the fp32 GEMM kernels run inside this operator
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
               "efficiency": to_json(eff), "ops": ops,
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

