"""The process around the step: debugging modes left on, and an inference whose own code
path differs from the one the runner drove (autograd state built, modules in training
mode). Read from the profile where it shows them (anomaly detection's NaN checks in the
backward), and from what the runner observed of the process (Profile.process, from
run.Section.process: empty for imported profiles)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...model.choice import OVER_STEPS, either, of, when
from ...model.finding import Evidence, Finding, opt
from ...model.profile import Profile
from .. import savings
from ..findings import WhatIf, basis, operators, rule

# What anomaly detection adds to a backward: for each output of each backward node,
# ``isnan(output)._is_any_true().item()`` (torch/csrc/autograd/engine.cpp), three calls
# that nothing else in a training step makes in these numbers. Fewer than this many
# checks per step are someone's own NaN test, not the mode.
_CHECKS = ("aten::isnan", "aten::_is_any_true")
_ITEM = ("aten::item",)
MIN_CHECKS = 4


def anomaly_checks(profile: Profile) -> tuple[float, int]:
    """The time of anomaly detection's NaN checks in the profile, inclusive, on its basis
    (device time on a GPU, CPU time otherwise), over its steps, and their number over those steps:
    ``aten::isnan`` and ``aten::_is_any_true`` (as many of each: one per checked output),
    and as many ``aten::item`` calls as there were checks; (0, 0) without them."""
    rows = {o.name: o for o in operators(profile) if o.name in (*_CHECKS, *_ITEM)}
    steps = max(profile.steps, 1)
    if any(n not in rows for n in _CHECKS):
        return 0.0, 0
    n = min(rows[name].calls for name in _CHECKS)
    if n < MIN_CHECKS * steps:
        return 0.0, 0
    inclusive = "device_total_us" if basis(profile).name == "device" else "cpu_total_us"
    time_us = sum(getattr(rows[name], inclusive) for name in _CHECKS)
    item = rows.get("aten::item")
    if item is not None and item.calls:  # the loss's own .item() is not the mode's
        time_us += getattr(item, inclusive) * min(1.0, n / item.calls)
    return time_us, n


def _anomaly_timed(finding: Finding, timed: dict[str, Any]) -> None:
    """The saving was timed with the mode off (whatif.anomaly_step)."""
    if isinstance(finding.evidence, DebugMode):
        finding.evidence.timed_off = timed.get("fix") == "anomaly-off"


@dataclass(kw_only=True)
class DebugMode(Evidence):
    observed: bool  # the runner saw the mode on in the step
    checks: bool  # anomaly detection's NaN checks are in the profile
    timed_off: bool  # timed with the mode off (_anomaly_timed)
    # with the checks: their share of the basis and their time
    basis: str | None = opt()
    share: float | None = opt()
    op: str | None = opt()
    op_time_us: float | None = opt()
    calls: int | None = opt()  # the checks


_SAYS_DEBUG_MODE = {
    "steps": OVER_STEPS,
    "seen": either("checks_in_profile", "mode_observed", lambda v: of(DebugMode)(v).checks),
    "observed": when("runner_saw_it",
                     lambda v: of(DebugMode)(v).observed and of(DebugMode)(v).checks),
    "stacks": when("stacks_not_separable",
                   lambda v: of(DebugMode)(v).checks and not of(DebugMode)(v).timed_off),
}


@rule("debug-mode", says=_SAYS_DEBUG_MODE, evidence=DebugMode, saving=savings.removed,
      whatif=WhatIf("anomaly-off", notes=_anomaly_timed))
def debug_mode(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Autograd's anomaly detection is on in a training step: every backward node's
    outputs are checked for NaN (a synchronising ``item()`` each), and every forward node
    records the Python stack that made it. Seen in the profile by the checks, and where
    the runner observed the mode in the step (set for the process, or entered inside the
    step) by that."""
    time_us, checks = anomaly_checks(profile)
    observed = profile.process.get("anomaly") is True
    if not checks and not observed:
        return None
    b = basis(profile)
    evidence = DebugMode(observed=observed, checks=checks > 0, timed_off=False)
    if checks:
        evidence.basis = b.name
        evidence.share = time_us / b.total_us if b.total_us else 0.0
        evidence.op, evidence.op_time_us, evidence.calls = "aten::isnan", time_us, checks
    return Finding("debug-mode", "high", evidence,
                   ops=[*_CHECKS, *_ITEM] if checks else [])


def _inference_timed(finding: Finding, timed: dict[str, Any]) -> None:
    """The saving was timed on the model, its forward as the user's code runs it against
    the runner's (whatif.inference_step)."""
    if isinstance(finding.evidence, InferenceAutograd):
        finding.evidence.timed = timed.get("fix") == "inference-mode"


@dataclass(kw_only=True)
class InferenceAutograd(Evidence):
    saved_b: int  # what the graph keeps for a backward that never runs
    grad_enabled: bool  # the process's grad mode
    training_modules: int  # modules left in training mode
    training_layers: int  # of them, layers that behave otherwise in it (dropout, BN)
    timed: bool  # the saving was timed on the model (_inference_timed)
    unprofiled: bool  # True: observed and timed without the profiler


_SAYS_INFERENCE_AUTOGRAD = {
    # a graph of 1 KiB or more (less is not said: report_view)
    "saved": either("graph_saved", "graph_built",
                    lambda v: of(InferenceAutograd)(v).saved_b >= 1024),
    "modes": when("modules_in_training", lambda v: of(InferenceAutograd)(v).training_layers),
    "eval": when("call_eval_too", lambda v: of(InferenceAutograd)(v).training_layers),
}


@rule("inference-autograd", says=_SAYS_INFERENCE_AUTOGRAD, evidence=InferenceAutograd,
      saving=savings.unquantified,
      whatif=WhatIf("inference-mode", notes=_inference_timed))
def inference_autograd(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """An inference target whose own forward, run as its code runs it (the runner ran it
    once so: the process's grad mode, the modules in the modes the target handed them
    over in, without the runner's ``inference_mode()`` and ``eval()``), builds an
    autograd graph: its output holds a ``grad_fn``, and the graph keeps activations for a
    backward that never runs. The profiled step, under the runner's inference_mode, does
    not show that work: where the runner times it, the saving is the two steps' difference
    (whatif.inference_step). Modules left in training mode (dropout, batch norm) go with
    it: dropout-cost finds dropout where a profile shows it; here the runner's eval()
    kept it out of the profile, so this finding says so."""
    p = profile.process
    if p.get("probe_grad_fn") is not True or p.get("runner_inference_mode") is not True:
        return None
    saved = p.get("probe_saved_b")
    layers = p.get("training_layers")
    return Finding("inference-autograd", "medium",
                   InferenceAutograd(
                       saved_b=saved if isinstance(saved, int) else 0,
                       grad_enabled=p.get("grad_enabled") is True,
                       training_modules=int(p.get("training_modules") or 0),
                       training_layers=int(layers) if isinstance(layers, int) else 0,
                       timed=False,
                       # observed and timed without the profiler: nothing of it to distort
                       unprofiled=True))
