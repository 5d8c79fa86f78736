"""The step what-ifs: the model's own step with a fix applied, timed in turn with the step
as it is (``fixed_step``), the state a what-if leaves as it found it (``kept_state``), and
the dropout recipe."""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any, Callable, Iterator

from ...analyze.rules.operators import dropout_calls
from .timing import _in_turn


# The model's own step with a fix applied, timed in turn with the step as it is: one step
# of each a round, the order reversed every other round, at least STEP_ROUNDS rounds and
# more while both variants' steps add up to under STEP_BUDGET_S (at most STEP_ROUNDS_MAX).
# Each timed step follows STEP_LEAD untimed steps of the same variant, so that each is
# timed as a training loop runs it, after a step of its own: a step right after the other
# variant's gets the heap that one left (BERT on eager attention, sequences of 512, in
# inference, on the 2-core machine, 2026-11-29: 3,586 page faults a step right after its
# SDPA twin's step, none after its own; the switch to SDPA saved 16.5-20.8% of the step
# timed so, 10.7-16.9% after a step of its own).
STEP_LEAD = 1
STEP_ROUNDS = 7
STEP_BUDGET_S = 1.0
STEP_ROUNDS_MAX = 100
# A long step gets fewer rounds, down to STEP_ROUNDS_LEAST, so that one what-if's timed
# rounds take about STEP_WHATIF_S (cnn at the large preset on an H200, 2026-12-04: a
# data-bound step of about a second, three whole-step what-ifs and their second timing
# took the suite's cnn two minutes, where the nine targets had taken 146 s in all).
STEP_ROUNDS_LEAST = 3
STEP_WHATIF_S = 12.0


def steps_in_turn(step: Callable[[], Any], fix: Callable[[], Any], dev: Any,
                  budget_s: float = STEP_BUDGET_S,
                  faults: list[list[int]] | None = None) -> tuple[float, float]:
    """The median seconds of the model's step as it is and with ``fix`` (a context
    manager that applies it), each step timed from the host and synchronised after one
    of its own (``STEP_LEAD``), the two in turn so that the machine's speed, which moves
    from one second to the next on a shared host, is the same for both (dropout_heavy on
    the 2-core machine, 2026-11-29: the masks alone, timed beside the step, read 20-57%
    of it from one round to the next, while the step with and without them, in turn,
    saved 31-44%). ``faults``: two lists, to which each timed step's page faults go."""
    start = time.perf_counter()
    for _ in range(2):  # the warm-up of each: the allocator's blocks for either
        step()
        with fix():
            step()
    dev.synchronize()
    # a round runs four steps (each variant's lead and timed one)
    per_round = (time.perf_counter() - start) / 4 * (1 + STEP_LEAD) * 2
    least = max(STEP_ROUNDS_LEAST, min(STEP_ROUNDS, int(STEP_WHATIF_S / max(per_round, 1e-9))))
    as_is, fixed = _in_turn([step, step], dev, budget_s, least, STEP_ROUNDS_MAX,
                            within=[contextlib.nullcontext, fix], lead=STEP_LEAD,
                            faults=faults)
    return as_is, fixed


# What dropout_off makes do nothing: torch.nn.functional's dropouts (nn.Dropout and its
# kin call them, as does F.multi_head_attention_forward, and models call them directly)
# and torch's own, which models call too; scaled_dot_product_attention's dropout_p.
F_DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
              "feature_alpha_dropout")
TORCH_DROPOUTS = ("dropout", "dropout_", "alpha_dropout", "alpha_dropout_", "feature_dropout",
                  "feature_dropout_", "feature_alpha_dropout", "feature_alpha_dropout_")


def _drops(args: tuple[Any, ...], kwargs: dict[str, Any], default_training: bool) -> bool:
    """Whether a dropout called so would draw a mask: p above 0, in training (the
    functional's and torch's arguments alike: input, p, training, ...)."""
    p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
    training = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2
                                                 else default_training))
    try:
        return bool(training) and float(p) > 0
    except (TypeError, ValueError):
        return False


@contextlib.contextmanager
def dropout_off(counted: list[int] | None = None) -> Iterator[None]:
    """Every dropout the model calls does nothing inside the block: each of ``F_DROPOUTS``
    and ``TORCH_DROPOUTS`` returns its input, which is what they return at p=0 (ATen
    hands the input back itself), and scaled_dot_product_attention runs with dropout_p=0;
    all put back after. ``counted``: its one element counts the calls that would have
    drawn a mask (p above 0, in training)."""
    import torch
    import torch.nn.functional as F

    def off(orig: Any, default_training: bool) -> Callable[..., Any]:
        def dropout(*args: Any, **kwargs: Any) -> Any:
            if counted is not None and _drops(args, kwargs, default_training):
                counted[0] += 1
            return args[0] if args else kwargs["input"]
        return dropout

    def sdpa_off(orig: Any) -> Callable[..., Any]:
        def sdpa(*args: Any, **kwargs: Any) -> Any:
            p = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
            if counted is not None and isinstance(p, (int, float)) and p > 0:
                counted[0] += 1
            if len(args) > 4:
                args = (*args[:4], 0.0, *args[5:])
            else:
                kwargs["dropout_p"] = 0.0
            return orig(*args, **kwargs)
        return sdpa

    saved: list[tuple[Any, str, Any]] = []
    try:
        for name in F_DROPOUTS:
            if hasattr(F, name):
                orig = getattr(F, name)
                saved.append((F, name, orig))
                setattr(F, name, off(orig, name not in ("alpha_dropout",
                                                        "feature_alpha_dropout")))
        for name in TORCH_DROPOUTS:
            if hasattr(torch, name):
                orig = getattr(torch, name)
                saved.append((torch, name, orig))
                setattr(torch, name, off(orig, True))
        orig = F.scaled_dot_product_attention
        saved.append((F, "scaled_dot_product_attention", orig))
        F.scaled_dot_product_attention = sdpa_off(orig)
        yield
    finally:
        for owner, name, orig in reversed(saved):
            setattr(owner, name, orig)


@contextlib.contextmanager
def _in_mode(step: Any) -> Iterator[Any]:
    """The section's model in the section's mode inside the block (another section may
    have left it in its own: the inference section's eval() turns dropout off), each of
    its modules' modes put back after."""
    model = step.target.model
    modes = [(m, m.training) for m in model.modules()] if hasattr(model, "modules") else []
    if hasattr(model, "train"):
        model.train(step.mode == "train")
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training


def target_fix(step: Any, rule_id: str) -> Callable[[], Any] | None:
    """The fix the target itself gives for a finding (Target.fixes), if any."""
    fixes = getattr(getattr(step, "target", None), "fixes", None) or {}
    fix = fixes.get(rule_id)
    return fix if callable(fix) else None


def fixed_step(device: str, step: Any, fix: Callable[[], Any], name: str,
               in_mode: bool = True) -> dict[str, Any]:
    """The model's step with ``fix`` applied (a context manager factory) and as it is, in
    turn (``steps_in_turn``), in the section's mode (another section may have left the
    model in its own; the modules' modes are put back after): {"before_ms", "after_ms"}
    per step, "saved_share" (1 - their ratio), "whole_step", "fix" (``name``: what was
    applied) and, where they were counted, the page faults a timed step took as it is
    and fixed ("faults": the medians, per step), which reporter.analyze.savings sets
    against the faults the step took before the profiler ran. ``in_mode`` false: the
    modules' modes are the caller's to set (the fix sets its own)."""
    from .. import device as devices

    faults: list[list[int]] = [[], []]
    with _in_mode(step) if in_mode else contextlib.nullcontext():
        on, off = steps_in_turn(step, fix, devices.get(device), faults=faults)
    return {"before_ms": on * 1e3, "after_ms": off * 1e3, "saved_share": [1 - off / on],
            "whole_step": True, "fix": name,
            **({"faults": [float(statistics.median(f)) for f in faults]}
               if all(faults) else {})}


def _calls_with(step: Any, fix: Callable[[list[int]], Any]) -> int:
    """How many calls ``fix`` (given a one-element counter) turned over in one step of the
    model, in the section's mode."""
    counted = [0]
    with _in_mode(step), fix(counted):
        step()
    return counted[0]


def _patchable(step: Any) -> bool:
    """Whether the section's model runs Python code a patch reaches: not a compiled one
    (its graphs hold their operators)."""
    from ..inductor import compiled_model

    model = getattr(getattr(step, "target", None), "model", None)
    return model is not None and hasattr(model, "modules") and not compiled_model(model)


def dropout_step(section: Any, device: str, step: Any, steps: int) -> dict[str, Any] | None:
    """The model's step with every dropout at p=0 (``dropout_off``: the advice's first
    option, applied to the model) and as it is, in turn (``fixed_step``), with the dropout
    calls a step made that the fix turned off ("calls"). None where it cannot stand for
    the finding: a compiled model (its graphs hold their dropouts: nothing to patch), or
    a step that turned off fewer dropouts than the profile recorded (``steps`` profiled
    steps; dropout called where no patch reaches, TorchScript say: the saving would be
    of part of them)."""
    if not _patchable(step):
        return None
    calls = _calls_with(step, dropout_off)
    recorded = dropout_calls(section.profile) / max(steps, 1)
    if calls == 0 or calls < recorded - 0.5:
        return None
    return {**fixed_step(device, step, dropout_off, "dropout-off"), "calls": calls}


@contextlib.contextmanager
def kept_state() -> Iterator[None]:
    """The process-wide settings of torch that a what-if's code (the target's optimizer
    class, made again) may change, put back as they were after the block: grad mode,
    default dtype and device, intra-op threads, fp32 matmul precision, deterministic
    algorithms, anomaly detection. A what-if's side effect is not the next target's
    failure (W2)."""
    import torch

    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    anomaly = torch.is_anomaly_enabled()
    default_device = getattr(torch, "get_default_device", lambda: None)()
    try:
        yield
    finally:
        torch.set_grad_enabled(grad)
        if torch.get_default_dtype() != dtype:
            torch.set_default_dtype(dtype)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if torch.get_float32_matmul_precision() != precision:
            torch.set_float32_matmul_precision(precision)
        if (torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled()) != deterministic:
            torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        if torch.is_anomaly_enabled() != anomaly:
            torch.autograd.set_detect_anomaly(anomaly)
        now = getattr(torch, "get_default_device", lambda: None)()
        if now != default_device:
            torch.set_default_device(None if default_device is None or
                                     default_device.type == "cpu" else default_device)
