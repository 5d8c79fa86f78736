"""The recipes by name (``RECIPES``), which findings have one (``timeable``), and
``measure``, which times them for a section and records their failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from ...analyze.findings import RULES
from ...analyze.shapes import Call
from ...model.finding import Finding
from .convolutions import channels_last_step, conv_bias_step, cudnn_benchmark_step
from .modes import anomaly_step, inference_step
from .optimizer import optimizer_foreach
from .precision import lever_step, single_step
from .products import _products_drive, blowup_matmul, gemm_precision
from .sdpa import _FAST_PATH_OPS, attention, attention_step
from .steps import dropout_step, fixed_step, kept_state, target_fix
from .timing import Skipped


class Recorded:
    """The calls of the section's trace (reporter.ingest.traces.host_calls), read once and
    only when a recipe asks for them; an empty list without the trace."""

    def __init__(self, trace: Path | None) -> None:
        self.trace = trace
        self._calls: list[Call] | None = None

    @property
    def calls(self) -> list[Call]:
        if self._calls is None:
            from ...ingest.traces import host_calls

            self._calls = (host_calls(self.trace) if self.trace is not None
                           and self.trace.is_file() else [])
        return self._calls or []


Recipe = Callable[..., "dict[str, Any] | None"]


def _attention(section: Any, device: str, optimizer: Any, steps: int,
               recorded: Recorded | None = None, step: Any = None
               ) -> dict[str, Any] | None:
    # the model's own attention switched to SDPA, where it can be (a transformers model,
    # nn.MultiheadAttention), else its chain at the recorded shapes
    timed = attention_step(device, step) if step is not None else None
    if timed is not None:
        return timed
    if any(o.name in _FAST_PATH_OPS and o.calls for o in section.profile.ops):
        # torch's fast path of the modules: the chain timed alone leaves out what the
        # fast path fuses around it, which only the step timed without it weighs
        return None
    return attention(section.profile, device, section.label == "train", steps, section,
                     recorded.calls if recorded is not None else None)


def _optimizer(section: Any, device: str, optimizer: Any, steps: int,
               recorded: Recorded | None = None, step: Any = None
               ) -> dict[str, Any] | None:
    if optimizer is None or section.label != "train":
        return None
    return optimizer_foreach(optimizer, device)


def _gemm(section: Any, device: str, optimizer: Any, steps: int,
          recorded: Recorded | None = None, step: Any = None
          ) -> dict[str, Any] | None:
    if not _products_drive(section.profile):
        return None
    return gemm_precision(section.profile, device, steps,
                          recorded.calls if recorded is not None else None, section)


def _blowup(section: Any, device: str, optimizer: Any, steps: int,
            recorded: Recorded | None = None, step: Any = None
            ) -> dict[str, Any] | None:
    return blowup_matmul(section.profile, device, steps,
                         recorded.calls if recorded is not None else None, section,
                         section.label == "train")


def _dropout(section: Any, device: str, optimizer: Any, steps: int,
             recorded: Recorded | None = None, step: Any = None
             ) -> dict[str, Any] | None:
    return dropout_step(section, device, step, steps) if step is not None else None


def _single(section: Any, device: str, optimizer: Any, steps: int,
            recorded: Recorded | None = None, step: Any = None
            ) -> dict[str, Any] | None:
    return single_step(device, step) if step is not None else None


def _lever(section: Any, device: str, optimizer: Any, steps: int,
           recorded: Recorded | None = None, step: Any = None
           ) -> dict[str, Any] | None:
    return lever_step(section, device, step) if step is not None else None


def _anomaly(section: Any, device: str, optimizer: Any, steps: int,
             recorded: Recorded | None = None, step: Any = None
             ) -> dict[str, Any] | None:
    return anomaly_step(device, step)


def _inference(section: Any, device: str, optimizer: Any, steps: int,
               recorded: Recorded | None = None, step: Any = None
               ) -> dict[str, Any] | None:
    if step is None or section.label != "inference":
        return None
    return inference_step(device, step)


def _conv_bias(section: Any, device: str, optimizer: Any, steps: int,
               recorded: Recorded | None = None, step: Any = None
               ) -> dict[str, Any] | None:
    return conv_bias_step(section, device, step) if step is not None else None


def _cudnn_benchmark(section: Any, device: str, optimizer: Any, steps: int,
                     recorded: Recorded | None = None, step: Any = None
                     ) -> dict[str, Any] | None:
    return cudnn_benchmark_step(device, step) if step is not None else None


def _channels_last(section: Any, device: str, optimizer: Any, steps: int,
                   recorded: Recorded | None = None, step: Any = None
                   ) -> dict[str, Any] | None:
    return channels_last_step(device, step) if step is not None else None


# The replacements by recipe name, as rules name them (reporter.analyze.findings.WhatIf):
# each takes the section, the device, the target's optimizer, the profiled steps, the
# trace's calls (Recorded) and the section's step (runner._Stepper: one step of the
# model in the section's mode), which a recipe that applies the fix to the model runs.
RECIPES: dict[str, Recipe] = {"attention": _attention, "optimizer": _optimizer,
                              "gemm-precision": _gemm, "blowup-matmul": _blowup,
                              "dropout-off": _dropout, "single-precision": _single,
                              "lower-precision": _lever,
                              "conv-bias-off": _conv_bias, "cudnn-benchmark": _cudnn_benchmark,
                              "nhwc-layout": _channels_last,
                              "anomaly-off": _anomaly, "inference-mode": _inference}


def timeable(findings: list[Finding]) -> list[str]:
    """The ids of the findings whose rule has a replacement to time, in rule order."""
    ids = {f.rule for f in findings}
    return [r.id for r in sorted(RULES.values(), key=lambda r: r.order)
            if r.id in ids and r.whatif is not None]


def failure(exc: BaseException) -> dict[str, Any]:
    """What a what-if that raised says in the run (``Section.whatif_failed``): {"exit": the
    code given to sys.exit} or {"error": "Type: message"}, in one line of at most 200
    characters."""
    if isinstance(exc, SystemExit):
        return {"exit": " ".join(repr(exc.code).split())[:200]}
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return {"error": text[:200]}


def failure_text(why: dict[str, Any]) -> str:
    """``failure``'s record in words (progress lines, warnings)."""
    return f"sys.exit({why['exit']})" if "exit" in why else str(why.get("error"))


def timed_twice(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """A replacement timed twice in one run (runner._whatif_again): the mean of the two
    timings (each ``*_ms``; the first alone where the two chose different variants), and
    what each saved per step (``saved_ms``, in the order timed), from which the saving's
    range is read (reporter.analyze.savings) where they differ."""
    out = dict(first)
    if first.get("variant") == second.get("variant"):  # the optimizer's faster variant
        for key, value in first.items():
            other = second.get(key)
            if key.endswith("_ms") and isinstance(value, (int, float)) \
                    and isinstance(other, (int, float)):
                out[key] = (value + other) / 2
    out["saved_ms"] = [t["before_ms"] - t["after_ms"] for t in (first, second)]
    if "saved_share" in first and "saved_share" in second:  # a whole step's, each timing's
        out["saved_share"] = [*first["saved_share"], *second["saved_share"]]
    return out


def _interrupt(exc: BaseException) -> bool:
    return isinstance(exc, KeyboardInterrupt)


def measure(section: Any, rules: Iterable[str], device: str,
            optimizer: Any = None, skipped: dict[str, str] | None = None,
            trace: Path | Recorded | None = None,
            failed: dict[str, dict[str, Any]] | None = None,
            fatal: Callable[[BaseException], bool] = _interrupt, step: Any = None
            ) -> dict[str, dict[str, Any]]:
    """The replacements of ``rules`` (ids of the section's findings) that their rules name
    and that can be timed here, in rule order; ``optimizer``, the target's, for a
    training step; ``trace``, the section's Chrome trace (the order of the calls, their
    dtypes and what called what, which the aggregated profile does not keep). Those
    skipped on purpose go into ``skipped`` (rule id: why) and ``failed`` (rule id:
    {"need_b", "cap_b"}); those that raised anything (the target's optimizer class refusing
    a second instance, calling sys.exit, running out of memory) into ``failed`` (rule id:
    ``failure(exc)``), and the others are still timed. Only what ``fatal`` says is not a
    what-if's failure (a real Ctrl-C, a broken device) goes through. Each what-if runs in
    ``kept_state``. ``step``: one step of the model in the section's mode, for the recipes
    that apply a fix to the model itself (dropout's) and for the target's own fixes
    (Target.fixes); without it they are not timed."""
    recorded = trace if isinstance(trace, Recorded) else Recorded(trace)
    out: dict[str, dict[str, Any]] = {}
    b = section.profile.breakdown
    steps = len(b.steps_us) if b is not None and b.steps_us else max(section.profile.steps, 1)
    wanted = set(rules)
    for rule in sorted(RULES.values(), key=lambda r: r.order):
        own = target_fix(step, rule.id)  # the target's own fix for it, timed on its step
        if rule.id not in wanted or (rule.whatif is None and own is None):
            continue
        try:
            with kept_state():
                timed: dict[str, Any] | None
                if own is not None:
                    timed = fixed_step(device, step, own, "target")
                else:
                    assert rule.whatif is not None
                    timed = RECIPES[rule.whatif.recipe](section, device, optimizer, steps,
                                                        recorded, step)
        except Skipped as exc:
            if skipped is not None:
                skipped[rule.id] = str(exc)
            if failed is not None:
                failed[rule.id] = {"need_b": exc.need_b, "cap_b": exc.cap_b}
            continue
        except BaseException as exc:
            if fatal(exc) or failed is None:
                raise
            failed[rule.id] = failure(exc)
            continue
        if timed is not None:
            out[rule.id] = timed
    return out
