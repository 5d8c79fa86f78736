"""Findings and the rule registry, with the helpers rules share: the vocabulary that
reporter.analyze.rules (the built-in rules), reporter.analyze.analyzer (which runs them) and
reporter.analyze.savings (what each is worth) speak, in a module that imports none of them.

A rule is registered once, with its whole story (``Rule``): how it is detected, what its
fix is worth (its saving model), which catch-all finding it explains, when it is only a
symptom, and which replacement the runner can time for it (its what-if recipe). The
analyzer, the savings and the runner read the record; none of them names a rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypedDict

from ..model.choice import Choice
from ..model.finding import EVIDENCE, NOT_QUANTIFIABLE, Evidence, Finding, Saving
from ..model.profile import KIND_ANNOTATION, KIND_DATALOADER, KIND_OP, Op, Profile
from .efficiency import Efficiency

SEVERITIES = ("high", "medium", "low")
MIN_PROFILE_US = 100.0
MATMUL_OPS = {"aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::matmul",
              "aten::linear", "aten::addmv", "aten::mv"}
@dataclass(frozen=True)
class Worth:
    """What a saving model reads: the finding, its profile and the profile's efficiency
    (reporter.analyze.efficiency; a string says why there is none), the profile's other
    findings (so that two do not count the same time), the profiled steps and the mean
    step, the time the finding accounts for per step (from its share; None without one),
    and the step timed without the profiler (None when not timed)."""

    finding: Finding
    profile: Profile
    eff: Efficiency | str | None  # the profile's efficiency, or why there is none
    others: Sequence[Finding]
    steps: int
    step_us: float
    accounts_us: float | None
    real_step_us: float | None

    def unquantified(self) -> Saving:
        return Saving(self.accounts_us, None, None, None, self.step_us, NOT_QUANTIFIABLE)


RuleFunc = Callable[[Profile, dict[str, float]], "Finding | None"]
# From the findings a profile's rules returned, its efficiency and the statement's
# limits: the findings with the statement's made (see ``statement``).
DeriveFunc = Callable[[list[Finding], Any, dict[str, float]], list[Finding]]
SavingModel = Callable[[Worth], Saving]


@dataclass(frozen=True)
class WhatIf:
    """A replacement the runner times on the device for a finding (reporter.collect.whatif
    holds the recipes by name). ``replaces_all``: the fix does away with all the time the
    finding accounts for, not only the operators timed, so the timed "before" is at least
    that time. ``of_recorded``: the recipe applies the speed-up it timed to the operators'
    recorded times, so its milliseconds are of the profiled step (the others time both
    variants outright, without the profiler). A recipe may instead apply the fix to the
    model itself and time its whole step with and without it, in turn: its result says
    so (``whole_step``), and the share of that step it saved is the saving's share of the
    step timed without the profiler (reporter.analyze.savings). ``notes``: what the timed
    result adds to the finding's evidence for its words (the finding, the result as
    stored), where the advice depends on it."""

    recipe: str
    replaces_all: bool = False
    of_recorded: bool = False
    notes: Callable[[Finding, dict[str, Any]], None] | None = None


@dataclass(frozen=True)
class Rule:
    """A rule's whole story.

    - ``func``: detection, a pure function of a Profile and its limits; None for a
      statement, which ``derive`` makes from the other findings and the efficiency;
    - ``limits``: its default thresholds (overridable per run);
    - ``saving``: what its fix is worth (reporter.analyze.savings has the shared models;
      ``savings.unquantified`` says, explicitly, that the profile cannot tell);
    - ``explains``: whether a finding of this rule accounts for a catch-all finding's
      operators (the one given), beyond naming them, which always explains;
    - ``catch_all``: a finding dropped when another one explains its operators;
    - ``symptom``: whether, with its saving, the finding is only a symptom of another
      cause, left out of the ranking;
    - ``whatif``: the replacement the runner can time for it, if any;
    - ``frees``: whether its fix no longer makes the tensors of the finding's operators
      (a fused kernel, no mask, no copy): what they hold at the host's memory peak comes
      off it, and with it the page faults of mapping that memory again each step
      (reporter.analyze.savings.fault_share);
    - ``keeps_work``: whether its fix leaves every operator's work in the step (it takes
      away page faults, not operators): the fixed step keeps them all at their roofline
      at the least, which its saving stops short of (reporter.analyze.savings.kept_us);
    - ``host_work``: its finding is host work an idle device waits for (a per-sample
      loop, padding, launches): its fix takes that idle time too, which the device's own
      finding leaves out (reporter.analyze.savings.idle_left);
    - ``about_products``: its finding speaks of the step's matrix products (no separate
      near-roofline statement beside it);
    - ``says``: the sentences its findings' words choose between, by slot
      (reporter.model.choice; placed by reporter.render.sentences);
    - ``evidence``: the class of its findings' evidence (reporter.model.finding.Evidence),
      declared beside its detection: what it found, with units in the field names.
    """

    id: str
    func: RuleFunc | None
    limits: dict[str, float]
    order: int
    saving: SavingModel
    explains: Callable[[Finding, Finding], bool] | None = None
    catch_all: bool = False
    symptom: Callable[[Profile, Saving], bool] | None = None
    whatif: WhatIf | None = None
    derive: DeriveFunc | None = None
    frees: bool = False
    keeps_work: bool = False
    host_work: bool = False
    about_products: bool = False
    says: Mapping[str, Choice] = field(default_factory=dict)
    evidence: type[Evidence] = Evidence


RULES: dict[str, Rule] = {}


def _register(rule_id: str, **fields: Any) -> None:
    if rule_id in RULES:
        raise ValueError(f"rule id {rule_id!r} registered twice")
    if not callable(fields.get("saving")):
        raise ValueError(f"rule {rule_id!r} has no saving model")
    evidence = fields.get("evidence")
    if not (isinstance(evidence, type) and issubclass(evidence, Evidence)
            and evidence is not Evidence):
        raise ValueError(f"rule {rule_id!r} declares no evidence class of its own")
    RULES[rule_id] = Rule(rule_id, order=len(RULES), **fields)
    EVIDENCE[rule_id] = evidence


def rule(rule_id: str, *, saving: SavingModel, evidence: type[Evidence],
         explains: Callable[[Finding, Finding], bool] | None = None, catch_all: bool = False,
         symptom: Callable[[Profile, Saving], bool] | None = None,
         whatif: WhatIf | None = None, frees: bool = False, keeps_work: bool = False,
         host_work: bool = False, about_products: bool = False,
         says: Mapping[str, Choice] | None = None,
         **limits: float) -> Callable[[RuleFunc], RuleFunc]:
    """Register a rule under a stable id with its saving model, its evidence class, the
    rest of its story (see ``Rule``) and its default thresholds."""
    def register(func: RuleFunc) -> RuleFunc:
        _register(rule_id, func=func, limits=dict(limits), saving=saving, explains=explains,
                  catch_all=catch_all, symptom=symptom, whatif=whatif, frees=frees,
                  keeps_work=keeps_work, host_work=host_work, about_products=about_products,
                  says=dict(says or {}), evidence=evidence)
        return func
    return register


def statement(rule_id: str, *, saving: SavingModel, evidence: type[Evidence],
              about_products: bool = False,
              says: Mapping[str, Choice] | None = None, whatif: WhatIf | None = None,
              **limits: float) -> Callable[[DeriveFunc], DeriveFunc]:
    """Register a statement: a finding made after the rules ran, from their findings and
    the profile's efficiency (run only when there is one), such as near-roofline; its
    ``whatif``, as a rule's, is timed by the runner when the statement is made."""
    def register(derive: DeriveFunc) -> DeriveFunc:
        _register(rule_id, func=None, limits=dict(limits), saving=saving, derive=derive,
                  about_products=about_products, says=dict(says or {}), whatif=whatif,
                  evidence=evidence)
        return derive
    return register


# Helpers shared by rules ---------------------------------------------------

@dataclass(frozen=True)
class Basis:
    """Which time a share is of: device time on a GPU profile, CPU time otherwise."""

    name: str  # "device" or "cpu"
    attr: str  # Op attribute holding an operator's self time on this basis
    total_us: float


def basis(profile: Profile) -> Basis:
    if profile.has_device:
        return Basis("device", "self_device_us", profile.self_device_us)
    return Basis("cpu", "self_cpu_us", profile.self_cpu_us)


def operators(profile: Profile) -> list[Op]:
    """Operator rows (not kernels, runtime calls or annotations)."""
    return [o for o in profile.ops if o.kind == KIND_OP]


def share(ops: list[Op], b: Basis) -> float:
    if b.total_us <= 0:
        return 0.0
    return float(sum(getattr(o, b.attr) for o in ops)) / b.total_us


class OpFields(TypedDict):
    """An operator's fields in a finding's evidence (``op_evidence``)."""

    op: str
    op_share: float
    op_time_us: float
    calls: int
    mem_per_call_b: int


def op_evidence(op: Op, b: Basis) -> OpFields:
    mem = op.self_device_mem_b if b.name == "device" else op.self_cpu_mem_b
    return {"op": op.name, "op_share": share([op], b), "op_time_us": getattr(op, b.attr),
            "calls": op.calls, "mem_per_call_b": int(mem / op.calls) if op.calls else 0}


def step_wall_us(profile: Profile) -> float:
    """Wall time of the profiled steps: ProfilerStep rows, else the CPU total."""
    steps = [o for o in profile.ops
             if o.kind == KIND_ANNOTATION and o.name.startswith("ProfilerStep")]
    wall = sum(o.cpu_total_us for o in steps)
    return wall if wall > 0 else profile.self_cpu_us


def step_share(profile: Profile, time_us: float) -> tuple[float, float]:
    """A time's share of the profiled steps' wall time, and that wall time
    (0 and 0 when the profile has no time at all)."""
    wall = step_wall_us(profile)
    return (time_us / wall, wall) if wall > 0 else (0.0, 0.0)


def dataloader_rows(profile: Profile) -> list[Op]:
    return [o for o in profile.ops if o.kind == KIND_DATALOADER]
