"""Findings and the rule registry, with the helpers rules share: the vocabulary that
reporter.analyze.rules (the built-in rules), reporter.analyze.analyzer (which runs them) and
reporter.analyze.savings (what each is worth) speak, in a module that imports none of them.
reporter.analyze.analyzer re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .profile import KIND_ANNOTATION, KIND_DATALOADER, KIND_OP, Op, Profile

SEVERITIES = ("high", "medium", "low")
MIN_PROFILE_US = 100.0
MATMUL_OPS = {"aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::matmul",
              "aten::linear", "aten::addmv", "aten::mv"}


@dataclass
class Finding:
    rule: str
    severity: str
    evidence: dict[str, Any]  # raw numbers: shares in 0..1, times in us, memory in bytes
    ops: list[str] = field(default_factory=list)  # operators the finding explains

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "ops": self.ops, **self.evidence}


@dataclass(frozen=True)
class Rule:
    id: str
    func: Callable[[Profile, dict[str, float]], Finding | None]
    limits: dict[str, float]
    order: int


RULES: dict[str, Rule] = {}


RuleFunc = Callable[[Profile, dict[str, float]], "Finding | None"]


def rule(rule_id: str, **limits: float) -> Callable[[RuleFunc], RuleFunc]:
    """Register a rule under a stable id with its default thresholds."""
    def register(func: RuleFunc) -> RuleFunc:
        if rule_id in RULES:
            raise ValueError(f"rule id {rule_id!r} registered twice")
        RULES[rule_id] = Rule(rule_id, func, dict(limits), len(RULES))
        return func
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


def op_evidence(op: Op, b: Basis) -> dict[str, Any]:
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
