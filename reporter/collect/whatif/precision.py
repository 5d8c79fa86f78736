"""The precision what-ifs on the model's step: the step with the model in float32
(``single_step``) and the lever, the step under autocast or TF32 (``lever_step``)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from ...analyze.findings import RULES
from ...analyze.roofline import NearRoofline
from .steps import _patchable, fixed_step


def tensors_mapped(batch: Any, fn: Callable[[Any], Any]) -> Any:
    """The batch with ``fn`` applied to each tensor in it (in lists, tuples and dicts)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, (list, tuple)):
        return type(batch)(tensors_mapped(b, fn) for b in batch)
    if isinstance(batch, dict):
        return {k: tensors_mapped(v, fn) for k, v in batch.items()}
    return batch


@contextlib.contextmanager
def single_precision(step: Any) -> Iterator[None]:
    """The model in float32 inside the block, as a user who follows fp64-compute's advice
    has it: its float64 parameters and buffers, the optimizer's float64 state, each batch's
    float64 tensors as it is loaded (``_Stepper.cast``) and a float64 default dtype, all
    put back after (the parameters' gradients are dropped: the next step makes them)."""
    import torch

    f64 = torch.float64
    model, optimizer = step.target.model, step.target.optimizer
    params: list[tuple[Any, Any]] = []
    for t in [*model.parameters(), *model.buffers()]:
        if t.dtype == f64:
            params.append((t, t.data))
            t.data = t.data.float()
    states: list[tuple[dict, Any, Any]] = []
    for state in (optimizer.state.values() if optimizer is not None else ()):
        for key, value in list(state.items()):
            if torch.is_tensor(value) and value.dtype == f64:
                states.append((state, key, value))
                state[key] = value.float()
    default = torch.get_default_dtype()
    cast = getattr(step, "cast", None)
    step.cast = lambda batch: tensors_mapped(
        batch, lambda t: t.float() if t.dtype == f64 else t)
    if default == f64:
        torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(default)
        step.cast = cast
        for t, data in params:
            t.data = data
            if isinstance(t, torch.nn.Parameter):
                t.grad = None
        for state, key, value in states:
            state[key] = value


def single_step(device: str, step: Any) -> dict[str, Any] | None:
    """The model's step in float32 (``single_precision``) and as it is, in turn
    (``fixed_step``). None for a compiled model (its graphs were traced in float64)."""
    if not _patchable(step):
        return None
    return fixed_step(device, step, lambda: single_precision(step), "float32")


@contextlib.contextmanager
def lower_precision(step: Any, dtype: str) -> Iterator[None]:
    """The section's step in ``dtype`` inside the block, as a user who follows the
    near-roofline lever has it: ``torch.autocast`` in bf16 or fp16 around the forward and
    the loss, where the step enters its own (runner._Stepper), or TF32 for the fp32
    matrix products; put back after."""
    import torch

    from .. import device as devices

    if dtype == "tf32":
        with devices.tf32_matmul("high"):
            yield
        return
    own = step._autocast
    device_type = step._tensors.split(":")[0]
    cast = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    step._autocast = lambda: torch.autocast(device_type, dtype=cast)
    try:
        yield
    finally:
        step._autocast = own


def lever_dtype(section: Any) -> str | None:
    """The dtype the section's finding that asks for this recipe (near-roofline) names as
    its lever (a higher peak on this machine: "tf32", "bf16" or "fp16"), or None."""
    from ...analyze.analyzer import analyze_section

    def asks(rule_id: str) -> bool:
        r = RULES.get(rule_id)
        return r is not None and r.whatif is not None and r.whatif.recipe == "lower-precision"

    made = next((f for f in analyze_section(section).findings if asks(f.rule)), None)
    dtype = made.evidence.faster_dtype \
        if made is not None and isinstance(made.evidence, NearRoofline) else None
    return dtype if dtype in ("tf32", "bf16", "fp16") else None


def lever_step(section: Any, device: str, step: Any) -> dict[str, Any] | None:
    """The model's step with the near-roofline lever applied (``lower_precision``) and as
    it is, in turn (``fixed_step``): what the lower precision saves measured, not read
    off the peaks' ratio (DistilBERT training on a 2-core CPU, 2026-12-04: the bf16 peak
    promised 44.6% of the step, bf16 autocast saved 34.5%; on BART it was 15x slower).
    None without a lever, for a compiled model (its graphs hold their dtypes) or a step
    that enters no autocast of ours (a target's own step function)."""
    if not _patchable(step) or not hasattr(step, "_autocast"):
        return None
    dtype = lever_dtype(section)
    if dtype is None:
        return None
    return fixed_step(device, step, lambda: lower_precision(step, dtype),
                      "tf32" if dtype == "tf32" else f"autocast-{dtype}")
