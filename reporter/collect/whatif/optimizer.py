"""The optimizer what-if: a per-parameter optimizer step against the same optimizer with
``foreach=True``."""

from __future__ import annotations

import inspect
from functools import partial
from typing import Any

from .timing import Skipped, _median_s


# Copies of parameters and gradients past this size are not made for a what-if.
MAX_COPY_B = 1 << 30


def optimizer_foreach(optimizer: Any, device: str) -> dict[str, Any] | None:
    """The optimizer's step as configured (one parameter at a time), with
    ``foreach=True`` and, where the optimizer has one for this device, ``fused=True``,
    each on its own copy of the parameters and their gradients; the faster of the two
    is the "after" (``variant`` says which)."""
    import torch

    params = [p for g in optimizer.param_groups for p in g["params"]]
    if not params:
        return None
    cls, defaults = type(optimizer), dict(optimizer.defaults)
    if "foreach" not in defaults:
        return None  # an optimizer without a foreach implementation
    from .. import device as devices

    dev = devices.get(device)
    # a copy holds the parameters, their gradients and the optimizer's state (Adam's two
    # moments): four times the parameters, one copy at a time
    need = 4 * sum(p.numel() * p.element_size() for p in params)
    free = dev.free_memory()
    cap = min(MAX_COPY_B, free // 2 if free is not None else MAX_COPY_B)
    if need > cap:
        raise Skipped("copies of the optimizer's parameters", need, cap)
    timed = partial(_median_s, dev=dev, host=True)  # the launches are the point

    def copy(foreach: bool, fused: bool = False) -> Any:
        copies = []
        for p in params:
            c = p.detach().clone().requires_grad_(True)
            c.grad = (p.grad.detach().clone() if p.grad is not None
                      else torch.randn_like(p) * 1e-3)
            copies.append(c)
        options = {**defaults, "foreach": foreach and not fused}
        if "fused" in options:
            options["fused"] = True if fused else None
        # Only what the constructor takes (AdamW keeps decoupled_weight_decay in its
        # defaults but sets it itself).
        accepted = inspect.signature(cls.__init__).parameters
        return cls(copies, **{k: v for k, v in options.items() if k in accepted})
    try:
        before = timed(copy(False).step)
        after = {"foreach": timed(copy(True).step)}
    except (RuntimeError, TypeError, ValueError):
        return None  # options this optimizer does not take that way
    if "fused" in defaults:
        try:
            after["fused"] = timed(copy(False, fused=True).step)
        except (RuntimeError, TypeError, ValueError):
            pass  # no fused implementation for this device or these options
    variant = min(after, key=lambda k: after[k])
    return {"before_ms": before * 1e3, "after_ms": after[variant] * 1e3, "variant": variant,
            **{f"{k}_ms": v * 1e3 for k, v in after.items()}, "params": len(params)}
