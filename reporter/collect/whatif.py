"""Advice timed on the device: the replacement a finding proposes, at the recorded shapes.

When the runner has the device at hand and a finding's fix is an operator
replacement, it times the operators as the model ran them and their
replacement at the shapes and dtype the profile recorded, on the same device
(warm-up, synchronised, the median of repeats, a fraction of a second each).
The result, per step, is stored in the run (``Section.whatif``) and the report
says "measured here: X -> Y"; reporter.analyze.savings takes it over its estimate, and
a replacement that is not faster here is not given as a main problem.

Measured now: unfused attention (bmm/matmul + softmax + bmm/matmul) against
``scaled_dot_product_attention``, forward (and backward for a training step), or, where
the model's own attention can be switched to it where it stands (a transformers model
on its eager attention, nn.MultiheadAttention asked for its weights: see
``attention_step``), by the model's own step with and without that switch;
a per-parameter optimizer step against the same optimizer with ``foreach=True`` and
``fused=True`` (where it has one), on copies of the model's parameters and gradients;
fp32 matrix products (mm, addmm, bmm, baddbmm) against the same products in bf16
and in TF32, at the shapes that hold most of their time, the speed-up applied to
their recorded time (the casts that autocast adds are not counted: for weights it
caches them within a step); a blown-up pairwise product (repeat, then mul and sum over the last
dimension) against the matrix product that computes it, likewise; and dropout, by the
model's own step with every dropout at p=0 taken in turn with the step as it is (the fix
applied to the model, not to operators at recorded shapes: see ``dropout_off``).

Each rule names its recipe where it is registered (reporter.analyze.findings.WhatIf);
``RECIPES`` holds them by name, and ``timeable`` says which findings have one.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..analyze.findings import RULES
from ..analyze.rules.operators import dropout_calls
from ..analyze.shapes import (
    BACKWARD_NODE,
    REDUCED,
    Call,
    Chain,
    attention_pattern,
    backward_nodes,
    blowup_chains,
    recorded_autocast,
)
from ..analyze.shapes import dims as _dims
from ..analyze.shapes import shapes as _shapes
from ..model.finding import Finding
from ..model.profile import Profile
from . import machine

SOFTMAX = ("aten::_softmax", "aten::softmax")
PRODUCTS = ("aten::bmm", "aten::matmul")
BUDGET_S = 0.3  # per variant


def attention_shapes(profile: Profile, calls: list[Call] | None = None
                     ) -> dict[str, Any] | None:
    """The unfused attention's shapes: the softmax over scores (..., L, S) that took the
    most time, and the products around it: q (N, L, E), k (N, S, E), v (N, S, Ev), N the
    product of the scores' batch dimensions (``batch``). And the rest of the chain as the
    profile recorded it, which the fused kernel does away with too: the scaling of the
    scores (``scale``: the ``aten::div`` or ``aten::mul`` of a scores-shaped tensor by a
    scalar), the masked calls (``masked``: an ``aten::masked_fill`` of the scores, per
    forward call; ``causal`` when an ``aten::triu``/``tril`` of the mask's shape built it)
    and which operands the products copied to make them dense (``copies``: q, k, v; an
    ``aten::clone`` of a view of their shape, as ``matmul`` makes of a transposed head).

    In a training step the backward's products have the same form: the gradient of the
    scores is (N, L, Ev) @ (N, Ev, S), read alone as q @ k^T with E = Ev. With the trace's
    ``calls`` only the forward's products count (those outside autograd's backward nodes);
    without them, a training step whose products allow two readings is not read (None)."""
    forward = _forward_products(calls) if calls else None
    train = any(o.name == "aten::_softmax_backward_data" for o in profile.ops_by_shape)
    rows = sorted((o for o in profile.ops_by_shape if o.name in SOFTMAX),
                  key=lambda o: o.cpu_total_us + o.device_total_us, reverse=True)
    for soft in rows:
        dims = _shapes(soft.input_shapes)
        if not dims or not isinstance(dims[0], list) or len(dims[0]) < 3:
            continue
        *batch, lq, ls = dims[0]
        n = math.prod(batch)
        e = ev = None
        es: set[int] = set()
        evs: set[int] = set()
        for o in profile.ops_by_shape:
            d = _shapes(o.input_shapes) if o.name in PRODUCTS and (
                forward is None or (o.name, o.input_shapes) in forward) else None
            if not d or len(d) < 2 or not all(isinstance(x, list) and len(x) >= 3 for x in d[:2]):
                continue
            a, b = d[0], d[1]
            if math.prod(a[:-2]) != n:
                continue
            if a[-2:-1] == [lq] and b[-1] == ls and a[-1] == b[-2]:
                e = a[-1]  # q @ k^T
                es.add(e)
            elif a[-2:] == [lq, ls] and b[-2] == ls:
                ev = b[-1]  # p @ v
                evs.add(ev)
        if forward is None and train and (len(es) > 1 or len(evs) > 1):
            continue  # the forward's products or the backward's: the profile cannot tell
        if e:
            return {"n": n, "l": lq, "s": ls, "e": e, "ev": ev or e, "calls": soft.calls,
                    "scores": list(dims[0]), "batch": list(batch),
                    **_attention_chain(profile, list(dims[0]), e, ev or e, soft.calls)}
    return None


def _forward_products(calls: list[Call]) -> set[tuple[str, str]]:
    """The (name, input shapes) rows of the matrix products the forward called: those
    not inside an autograd backward node (``BACKWARD_NODE``), at any depth."""
    from ..ingest.traces import shape_key

    inside: dict[int, bool] = {}

    def in_backward(i: int) -> bool:
        path: list[int] = []
        j: int | None = i
        found = False
        while j is not None:
            if j in inside:
                found = inside[j]
                break
            if calls[j].name.startswith(BACKWARD_NODE):
                found = True
                break
            path.append(j)
            j = calls[j].parent
        for k in path:
            inside[k] = found
        return found
    return {(c.name, shape_key(c.dims)) for i, c in enumerate(calls)
            if c.name in PRODUCTS and c.op and not in_backward(i)}


def _attention_chain(profile: Profile, scores: list[int], e: int, ev: int,
                     calls: int) -> dict[str, Any]:
    """What the recorded chain does around the products and the softmax (see
    ``attention_shapes``)."""
    *batch, lq, ls = scores
    scale = None
    masks: list[list[int]] = []
    masked = triangles = 0
    copied: dict[str, bool] = {"q": False, "k": False, "v": False}
    operands = {"q": batch + [lq, e], "k": batch + [e, ls], "v": batch + [ls, ev]}
    train = any(o.name == "aten::_softmax_backward_data" for o in profile.ops_by_shape)
    for o in profile.ops_by_shape:
        d = _dims(o)
        if not d:
            continue
        if o.name in ("aten::div", "aten::mul") and d[0] == scores and not any(d[1:]):
            if scale is None or o.name == "aten::div":
                scale = o.name  # by a scalar (recorded as [] or not at all)
        elif o.name == "aten::masked_fill" and d[0] == scores:
            # its backward is a masked_fill of the gradient: one forward call in two
            masked += o.calls // 2 if train else o.calls
            masks += d[1:2]
        elif o.name in ("aten::clone", "aten::contiguous"):
            for name, shape in operands.items():
                copied[name] = copied[name] or (len(batch) > 1 and d[0] == shape)
    for o in profile.ops_by_shape:
        d = _dims(o)
        if o.name in ("aten::triu", "aten::tril") and d and d[0] in masks \
                and d[0][-2:] == [lq, ls]:
            triangles += o.calls
    masked = min(masked, calls)
    return {"scale": scale, "masked": masked, "causal": bool(masked and triangles),
            "copies": sorted(k for k, v in copied.items() if v)}


GPU_SAMPLE_S = 1e-3  # on a GPU each sample runs back to back calls for about this long


def _median_s(fn: Callable[[], Any], dev: Any, budget_s: float = BUDGET_S,
              host: bool = False) -> float:
    """The median seconds of one call of ``fn``. On a GPU, the device's time: calls run
    back to back between two events, so that a microsecond kernel is not timed as the
    launch and synchronisation latency around it; ``host`` times each call from the host,
    synchronised (the optimizer's step, where the launches are the point)."""
    for _ in range(3):
        fn()
    dev.synchronize()
    if dev.is_gpu and not host:
        return _device_median_s(fn, dev, budget_s)
    times: list[float] = []
    spent = 0.0
    while len(times) < 5 or (spent < budget_s and len(times) < 200):
        start = time.perf_counter()
        fn()
        dev.synchronize()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        spent += elapsed
    return statistics.median(times)


def _medians_s(fns: Sequence[Callable[[], Any]], dev: Any, budget_s: float = BUDGET_S
               ) -> list[float]:
    """The median seconds of one call of each of ``fns``, timed in turn, one call of each
    per round, the order reversed every other round: a burst of other work on the machine
    slows all of them alike instead of the one being timed then (transformer in inference
    on a shared 2-core machine, 2026-11-28: the attention timed one variant after the
    other saved 0.66-1.41 ms a step from one call to the next, and 0.0-0.4 ms in three
    runs, against 16-21% of an 8 ms step measured). ``budget_s`` per function, as for
    ``_median_s``. On a GPU, each on the device as ``_median_s`` times it: its kernels
    are what the host's load does not slow."""
    if dev.is_gpu:
        return [_median_s(fn, dev, budget_s) for fn in fns]
    for fn in fns:
        for _ in range(3):
            fn()
    dev.synchronize()
    return _in_turn(fns, dev, budget_s * len(fns), 5, 200)


def _in_turn(fns: Sequence[Callable[[], Any]], dev: Any, budget_s: float, least: int,
             most: int, within: Sequence[Callable[[], Any]] | None = None,
             lead: int = 0, faults: list[list[int]] | None = None) -> list[float]:
    """The median seconds of one call of each of ``fns``, timed from the host and
    synchronised, one call of each per round, the order reversed every other round: at
    least ``least`` rounds, and more while the calls add up to under ``budget_s`` (at
    most ``most``). ``within``, where given, holds for each call a context manager that
    is entered before it is timed and left after (a fix applied to the model's step).
    ``lead``: calls of the same function run untimed just before the timed one, inside
    the same context (their time counts against the budget). ``faults``, where given:
    one list per function, to which the page faults (minor) of each timed call go."""
    times: list[list[float]] = [[] for _ in fns]
    spent = 0.0
    rounds = 0
    while rounds < least or (spent < budget_s and rounds < most):
        order = range(len(fns)) if rounds % 2 == 0 else range(len(fns) - 1, -1, -1)
        for i in order:
            with within[i]() if within is not None else contextlib.nullcontext():
                start = time.perf_counter()
                for _ in range(lead):
                    fns[i]()
                dev.synchronize()
                before = machine.faults()[0] if faults is not None else 0
                led = time.perf_counter()
                fns[i]()
                dev.synchronize()
                end = time.perf_counter()
                if faults is not None:
                    faults[i].append(machine.faults()[0] - before)
            times[i].append(end - led)
            spent += end - start
        rounds += 1
    return [statistics.median(t) for t in times]


class Skipped(Exception):
    """A replacement not timed on purpose: its operands would take ``need_b`` bytes, over
    the cap of ``cap_b`` (see ``_cap``)."""

    def __init__(self, what: str, need_b: int, cap_b: int) -> None:
        super().__init__(f"{what} would allocate {need_b:,} bytes, over the cap of {cap_b:,}")
        self.need_b, self.cap_b = int(need_b), int(cap_b)


def _device_median_s(fn: Callable[[], Any], dev: Any, budget_s: float) -> float:
    def sample(calls: int) -> float:
        begin, end = dev.event(), dev.event()
        begin.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return max(begin.elapsed_time(end) / 1e3, 0.0) / calls
    one = sample(1)
    calls = max(1, min(100, math.ceil(GPU_SAMPLE_S / max(one, 1e-7))))
    times: list[float] = []
    spent = 0.0
    while len(times) < 5 or (spent < budget_s and len(times) < 200):
        t = sample(calls)
        times.append(t)
        spent += t * calls
    return statistics.median(times)


def _autocast(dev: Any, section: Any, calls: list[Call] | None = None) -> Any:
    """The autocast the section's model ran under, for timing its replacements alike: the
    one the target declared, else the one its trace shows (autocast entered inside the
    model's forward: analyze.shapes.recorded_autocast)."""
    import contextlib

    import torch

    declared = (getattr(section, "precision", None) or {}).get("autocast")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
        declared or (recorded_autocast(calls) if calls else None) or "")
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(dev.tensor_device.split(":")[0], dtype=dtype)


def _generator(dev: Any) -> Any:
    """A seeded generator on the device the operands are drawn on (a CPU draw of a large
    operand is serial: seconds)."""
    import torch

    return torch.Generator(device=dev.tensor_device).manual_seed(0)


_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


# A what-if may allocate this many times the model's own tensors at their peak (the
# memory profile's), and at least MIN_CAP_B: a model that holds 5 MB of tensors does not
# get 2 GiB of operands because its products read broadcast views of recorded shapes.
OWN_TENSORS_TIMES = 4
MIN_CAP_B = 256 << 20


def own_tensors_b(section: Any) -> int | None:
    """The bytes the model's own tensors held at their peak in one step: the memory
    profile's peak, else the device's allocated peak; None when neither was recorded."""
    tm = getattr(section, "tensor_memory", None)
    if tm is not None and tm.peak_b > 0:
        return int(tm.peak_b)
    held = (getattr(section, "memory", None) or {}).get("device_allocated_b")
    return int(held) if isinstance(held, int) and held > 0 else None


def _cap(dev: Any, section: Any = None) -> int:
    """Bytes a what-if may allocate for its operands: the least of MAX_OPERANDS_B, half of
    what the device where they live has free (the GPU's memory on a GPU, not the host's)
    and OWN_TENSORS_TIMES the model's own tensors (at least MIN_CAP_B)."""
    free = dev.free_memory()
    cap = min(MAX_OPERANDS_B, free // 2 if free is not None else MAX_OPERANDS_B)
    own = own_tensors_b(section) if section is not None else None
    if own is not None:
        cap = min(cap, max(MIN_CAP_B, OWN_TENSORS_TIMES * own))
    return cap


def attention(profile: Profile, device: str, train: bool, steps: int,
              section: Any = None, calls: list[Call] | None = None
              ) -> dict[str, Any] | None:
    """The attention as the model computed it and ``scaled_dot_product_attention``, both
    timed the same way at the recorded shapes, in the recorded dtype and under the
    model's autocast: {"before_ms", "after_ms"} per step, or None when the shapes cannot
    be read. The "before" is the recorded chain: the scores' product on operands as the
    model held them (transposed heads its product copied dense), their scaling (a
    division or a multiplication), the masked calls (a triangle built each call where
    the profile shows one, else the mask the trace shows applied to the scores, boolean or
    added), the softmax and the second product; the "after" SDPA with the same mask
    (``is_causal`` where the mask is causal) on the same operands, views as they are."""
    import torch
    from torch.nn import functional as F

    from . import device as devices

    shape = attention_shapes(profile, calls)
    if shape is None:
        return None
    scores = shape["scores"]
    pattern = (attention_pattern(calls, scores) if calls else None) or {
        "dtype": "fp32", "mask": None, "boolean": False, "causal": False}
    dtype = getattr(torch, _DTYPES[pattern["dtype"]])
    *batch, lq, ls = scores
    e, ev = shape["e"], shape["ev"]
    n = shape["n"]
    size = torch.tensor([], dtype=dtype).element_size()
    mask_b = math.prod(pattern["mask"]) * size if pattern["mask"] else 0
    # q, k, v (and the projections' inputs they are made from), and the scores with their
    # scaled, masked and softmaxed copies; twice in training (their gradients)
    need = (size * (2 * (n * lq * e + n * ls * e + n * ls * ev) + 4 * n * lq * ls)
            * (2 if train else 1) + mask_b)
    dev = devices.get(device)
    cap = _cap(dev, section)
    if need > cap:
        raise Skipped("attention at the recorded shapes", need, cap)
    gen = _generator(dev)
    batch = shape.get("batch") or [n]
    copies = set(shape.get("copies") or ())

    # Where the heads are split off projections' outputs and put back for the output's
    # projection (scores with a batch and a heads dimension), each call runs between
    # those products, as in the model: a projection of width heads x E writes each
    # operand that the recorded products copied, and one reads the heads' outputs put
    # back beside each other. They are timed alone too and taken off both sides: what
    # is left is the attention's own time and what its score matrices cost the products
    # around it, whose operands they push out of the cache (transformer in inference,
    # 2026-11-28: the chain alone saved 0.96-1.01 ms a step, the attention modules
    # 1.24 ms, the whole step 1.37 ms; the chain between projections 1.09-1.20 ms).
    heads = len(batch) == 2
    width = math.prod(batch[1:])

    def leaf(*shape: int) -> Any:
        return torch.randn(*shape, generator=gen, device=dev.tensor_device
                           ).to(dtype).requires_grad_(train)

    def weight(rows: int, cols: int) -> Any:
        return (torch.randn(rows, cols, generator=gen, device=dev.tensor_device)
                / math.sqrt(cols)).to(dtype).requires_grad_(train)

    def make(name: str, rows: int, cols: int) -> Callable[[], Any]:
        """An operand (*batch, rows, cols) in the recorded dtype, as a function that gives
        it for a call; where the model's was a view that its product copied, as heads
        split off a projection's output are: a (batch, rows, heads x cols) projection's
        output viewed as (batch, rows, heads, cols), rows and heads transposed, so that
        folding the batch copies it, and so that its gradient goes back through the
        projection (the copy the unfused products' gradients need and the fused kernel's
        may not)."""
        def split(t: Any) -> Any:
            return t.view(batch[0], rows, *batch[1:], cols).movedim(1, -2)
        if name in copies and heads:
            x, w = leaf(batch[0], rows, width * cols), weight(width * cols, width * cols)
            return lambda: split(F.linear(x, w))
        t = split(leaf(batch[0], rows, width * cols)) if name in copies else \
            leaf(*batch, rows, cols)
        return lambda: t
    made = make("q", lq, e), make("k", ls, e), make("v", ls, ev)
    out_w = weight(width * ev, width * ev) if heads else None
    scale = 1 / math.sqrt(e)
    causal = bool(shape.get("causal")) or bool(pattern["causal"])
    added = pattern["mask"] is not None and not pattern["boolean"]
    mask_shape = pattern["mask"] or [lq, ls]
    given = (torch.zeros(*mask_shape, dtype=dtype, device=dev.tensor_device) if added else
             torch.rand(*mask_shape, generator=gen, device=dev.tensor_device) < 0.1)

    def mask() -> Any:
        if causal:  # built each call, as the recorded triangle was
            return torch.ones(lq, ls, dtype=torch.bool, device=dev.tensor_device).triu(1)
        return given

    # The heads' outputs as the model goes on with them: where the scores have a batch and
    # a heads dimension, put back beside each other, (batch, L, heads x Ev), the copy that
    # the unfused product's layout needs and the fused kernel's may not; and a dense
    # gradient from there back, as the layers after it give (the gradient of a sum is an
    # expanded tensor, which neither variant sees in a model).
    def merged(out: Any) -> Any:
        if heads:
            out = out.transpose(1, 2).reshape(batch[0], lq, width * ev)
            return F.linear(out, out_w)
        return out
    grads: dict[tuple[int, ...], Any] = {}

    def grad_like(out: Any) -> Any:
        key = tuple(out.shape)
        if key not in grads:
            grads[key] = torch.randn(*key, generator=gen, device=dev.tensor_device).to(dtype)
        return grads[key]

    def backward(out: Any) -> None:
        out.backward(grad_like(out))

    def unfused(masked: bool) -> None:
        # torch.matmul on the operands as the model held them: it folds the batch
        # dimensions (copying a transposed head dense) and unfolds the result, as the
        # recorded chain did
        q, k, v = (get() for get in made)
        scores = torch.matmul(q, k.transpose(-1, -2))
        if shape.get("scale") == "aten::div":
            scores = scores / math.sqrt(e)
        else:
            scores = scores * scale
        if masked:
            scores = scores + given if added and not causal else scores.masked_fill(
                mask(), float("-inf"))
        out = merged(torch.matmul(torch.softmax(scores, -1), v))
        if train:
            backward(out)

    def fused(masked: bool) -> None:
        q, k, v = (get() for get in made)
        attn_mask = (None if not masked or causal else given if added else ~given)
        out = merged(F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                                    is_causal=masked and causal))
        if train:
            backward(out)

    def around() -> None:
        """The projections alone, forward (and backward, from gradients of the shapes the
        attention gives them): what both sides take off."""
        made_now = [t for t in (get() for get in made) if t.grad_fn is not None]
        out = merged(torch.zeros(*batch, lq, ev, dtype=dtype, device=dev.tensor_device))
        if train:
            outs = [out, *made_now]
            torch.autograd.backward(outs, [grad_like(t) for t in outs])
    total = shape["calls"]
    # The masked calls the profile counts; where it counts none but the trace shows a mask
    # applied to the scores, every call is masked.
    masked_calls = min(int(shape.get("masked") or 0), total)
    if not masked_calls and (pattern["mask"] is not None or pattern["causal"]):
        masked_calls = total
    before = after = 0.0
    with _autocast(dev, section, calls):
        for masked, count in ((False, total - masked_calls), (True, masked_calls)):
            if count:
                # the chain, SDPA and the projections alone, timed in turn
                chain, sdpa, *alone = _medians_s(
                    [partial(unfused, masked), partial(fused, masked),
                     *([around] if heads else [])], dev)
                kept = alone[0] if alone else 0.0
                before += count * max(0.0, chain - kept)
                after += count * max(0.0, sdpa - kept)
    per_step = 1e3 / max(steps, 1)
    return {"before_ms": before * per_step, "after_ms": after * per_step,
            "shape": [n, lq, ls, e], "calls_per_step": total / max(steps, 1),
            "masked_per_step": masked_calls / max(steps, 1), "causal": causal,
            "copies": sorted(copies), "dtype": pattern["dtype"],
            "mask": ("causal" if causal else "added" if added else
                     "boolean" if masked_calls else None)}


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
    from . import device as devices

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


# Matrix operators and the positions of their two factors in the recorded inputs.
GEMMS = {"aten::mm": (0, 1), "aten::bmm": (0, 1), "aten::addmm": (1, 2),
         "aten::baddbmm": (1, 2)}
GEMM_COVER = 0.9  # time the shapes that hold this share of the products' time
GEMM_SHAPES = 8  # and no more shapes than this
GEMM_BUDGET_S = 0.05  # per shape and variant
MAX_OPERANDS_B = 2 << 30


def _gemm_time_us(o: Any) -> float:
    return float(o.device_total_us or o.cpu_total_us)


def reduced_rows(profile: Profile, calls: list[Call] | None) -> set[tuple[str, Any]]:
    """The (name, input shapes) rows of the matrix products whose recorded calls ran on
    bf16 or fp16 operands (autocast, or a model in that dtype): most of their calls, by
    the trace's input types."""
    if not calls:
        return set()
    from ..ingest.traces import shape_key

    votes: dict[tuple[str, Any], list[int]] = {}
    for c in calls:
        if c.name in GEMMS and c.op:
            i = GEMMS[c.name][0]
            v = votes.setdefault((c.name, shape_key(c.dims)), [0, 0])
            v[0 if (c.dtype(i) or "") in REDUCED else 1] += 1
    return {key for key, (low, full) in votes.items() if low > full}


def gemm_shapes(profile: Profile, reduced: set[tuple[str, Any]] | None = None,
                cap_b: int = MAX_OPERANDS_B
                ) -> tuple[list[tuple[Any, list[int], list[int]]], float]:
    """The fp32 matrix products' shapes that hold most of their time, most first: [(the
    recorded row, a, b)], and the fp32 products' recorded time in all (us). Rows in
    ``reduced`` (their calls ran in bf16 or fp16: reduced_rows) are not fp32's."""
    reduced = reduced or set()
    rows = sorted((o for o in profile.ops_by_shape if o.name in GEMMS
                   and (o.name, o.input_shapes) not in reduced),
                  key=_gemm_time_us, reverse=True)
    total = sum(_gemm_time_us(o) for o in rows)
    out: list[tuple[Any, list[int], list[int]]] = []
    covered = 0.0
    for o in rows:
        if len(out) >= GEMM_SHAPES or (total and covered >= GEMM_COVER * total):
            break
        dims = _shapes(o.input_shapes)
        i, j = GEMMS[o.name]
        if not dims or len(dims) <= j or not all(
                isinstance(d, list) and len(d) >= 2 and all(type(x) is int for x in d)
                for d in (dims[i], dims[j])):
            continue
        a, b = dims[i], dims[j]
        if a[-1] != b[-2] or (math.prod(a) + math.prod(b) + a[-2] * b[-1]
                              * math.prod(a[:-2])) * 6 > cap_b:  # fp32 and bf16
            continue
        out.append((o, a, b))
        covered += _gemm_time_us(o)
    return out, total


def gemm_precision(profile: Profile, device: str, steps: int,
                   calls: list[Call] | None = None, section: Any = None
                   ) -> dict[str, Any] | None:
    """What bf16 and TF32 make of the fp32 matrix products. Each of the shapes that hold
    most of their time is timed here in fp32 (TF32 as the model had it), in bf16 and in
    TF32; the speed-up measured at each shape applies to its recorded time, and their
    time-weighted mean to the products whose shapes were not timed. The recorded time,
    not the timed one, is the "before": in a training step many products run on
    transposed operands, which the kernels handle more slowly than the contiguous ones
    timed here. Products the trace's ``calls`` show in bf16 or fp16 already (autocast, a
    model in that dtype) are not converted: their time stays as it is in both. {"before_ms",
    "after_ms" (bf16), "tf32_ms"} per step, the shapes timed and the share of the fp32
    products' time they hold; None when no fp32 shape can be read."""
    import torch

    from . import device as devices

    reduced = reduced_rows(profile, calls)
    dev = devices.get(device)
    shapes, total_us = gemm_shapes(profile, reduced, _cap(dev, section))
    if not shapes or total_us <= 0:
        return None
    kept_us = sum(_gemm_time_us(o) for o in profile.ops_by_shape
                  if (o.name, o.input_shapes) in reduced)
    gen = _generator(dev)
    # TF32 through the device's one helper (set_float32_matmul_precision: torch's legacy
    # flag and its new API alike), put back as the model had it.
    as_model = "highest" if devices.matmul_precision() in (None, "highest") else "high"
    timed_us = bf16_us = tf32_us = 0.0
    for row, a, b in shapes:
        x = torch.randn(*a, generator=gen, device=dev.tensor_device)
        y = torch.randn(*b, generator=gen, device=dev.tensor_device)
        xb, yb = x.to(torch.bfloat16), y.to(torch.bfloat16)
        seconds: dict[str, float] = {}
        for key, precision, (p, q) in (("fp32", as_model, (x, y)),
                                       ("bf16", as_model, (xb, yb)),
                                       ("tf32", "high", (x, y))):
            with devices.tf32_matmul(precision):
                seconds[key] = _median_s(partial(torch.matmul, p, q), dev, GEMM_BUDGET_S)
        del x, y, xb, yb
        recorded = _gemm_time_us(row)
        timed_us += recorded
        bf16_us += recorded * seconds["bf16"] / seconds["fp32"]
        tf32_us += recorded * seconds["tf32"] / seconds["fp32"]
    per_step_ms = total_us / max(steps, 1) / 1e3
    kept_ms = kept_us / max(steps, 1) / 1e3
    return {"before_ms": per_step_ms + kept_ms,
            "after_ms": per_step_ms * bf16_us / timed_us + kept_ms,
            "tf32_ms": per_step_ms * tf32_us / timed_us + kept_ms, "shapes": len(shapes),
            "cover": timed_us / total_us}


BLOWUP_SHAPES = 3  # pairwise shapes timed at most


def _operand_like(shape: list[int], strides: list[int] | None, dtype: Any, gen: Any,
                  on: str, grad: bool = False) -> Any:
    """A tensor of ``shape`` laid out as recorded: an expanded view where the recorded
    strides are 0 (so that the multiply broadcasts as it did, and in training its gradient
    is summed back as the model's was), a strided view of a buffer just large enough where
    they are otherwise not the dense ones."""
    import torch

    from ..analyze.shapes import contiguous_strides

    if strides is None or len(strides) != len(shape) or any(x < 0 for x in strides):
        strides = contiguous_strides(shape)
    small = [1 if x == 0 else n for n, x in zip(shape, strides)]
    if strides == contiguous_strides(shape) or 0 in strides:
        leaf = torch.randn(*small, generator=gen, device=on).to(dtype).requires_grad_(grad)
        return leaf.expand(*shape) if small != list(shape) else leaf
    storage = 1 + sum((n - 1) * x for n, x in zip(shape, strides) if n > 0)
    base = torch.randn(storage, generator=gen, device=on).to(dtype).requires_grad_(grad)
    return base.as_strided(shape, strides)


def _recorded_us(profile: Profile, calls: list[Call], indexes: Iterable[int]) -> float:
    """The recorded time of these calls. On a GPU the device time of each call's
    (name, shapes) row over its calls (a backward node: of the operators directly inside
    it); on the CPU each call's own time."""
    from ..ingest.traces import shape_key

    wanted = list(indexes)
    if not profile.has_device:
        return sum(calls[i].end - calls[i].start for i in wanted)
    rows = {(o.name, o.input_shapes): o for o in profile.ops_by_shape}
    inside: dict[int, list[int]] = {}
    nodes = {i for i in wanted if calls[i].name.startswith(BACKWARD_NODE)}
    if nodes:
        for j, c in enumerate(calls):
            if c.parent is not None and c.op:
                inside.setdefault(c.parent, []).append(j)
    total = 0.0
    for i in wanted:
        for k in (inside.get(i, []) if i in nodes else [i]):
            row = rows.get((calls[k].name, shape_key(calls[k].dims)))
            if row is not None and row.calls:
                total += row.device_total_us / row.calls
    return total


def blowup_matmul(profile: Profile, device: str, steps: int,
                  calls: list[Call] | None = None, section: Any = None,
                  train: bool = False) -> dict[str, Any] | None:
    """The blown-up pairwise products as the model ran them, against the matrix product
    that computes them. Only the chains the trace recorded count (analyze.shapes.Chain:
    a broadcast ``mul`` whose output is what the ``sum`` called next reduces over the last
    dimension, a product of two operands each repeated along a dimension the other varies
    in): at each, the ``mul`` on operands of its recorded shapes and strides (broadcast
    views where the model's were) and the ``sum`` are timed against ``bmm`` of (n, x, z) by
    (n, z, y), in the recorded dtype and under the model's autocast, with their backward
    in a training step. Each chain's ratio applies to the recorded time of its own calls
    (and of their backward nodes); the copies that materialised its operands (repeat,
    contiguous) go, with the backward of everything that made them (an expand's is a sum).
    {"before_ms", "after_ms"} per step; None without a recorded chain (without the
    trace's calls nothing is claimed)."""
    import torch

    from . import device as devices

    if not calls:
        return None
    chains = blowup_chains(calls)
    if not chains:
        return None
    groups: dict[Any, list[Chain]] = {}
    for ch in chains:
        key = (tuple(ch.a[0]), tuple(ch.a[1] or ()), tuple(ch.b[0]), tuple(ch.b[1] or ()),
               calls[ch.mul].dtype(0))
        groups.setdefault(key, []).append(ch)

    def own(group: list[Chain]) -> list[int]:
        forward = [i for c in group for i in (c.mul, c.sum)]
        return forward + (backward_nodes(calls, forward) if train else [])
    ranked = sorted(groups.values(), key=lambda g: _recorded_us(profile, calls, own(g)),
                    reverse=True)
    dev = devices.get(device)
    gen = _generator(dev)
    on = dev.tensor_device
    before_us = after_us = 0.0
    made: set[int] = set()
    shapes: list[list[int]] = []
    cap = _cap(dev, section)
    for group in ranked[:BLOWUP_SHAPES]:
        ch = group[0]
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
            REDUCED.get(calls[ch.mul].dtype(0) or "", ""), torch.float32)
        size = torch.tensor([], dtype=dtype).element_size()
        if (2 * math.prod(ch.out) + ch.n * (ch.x * ch.z + ch.z * ch.y + ch.x * ch.y)
                ) * size * (3 if train else 1) > cap:
            continue
        a = _operand_like(*ch.a, dtype, gen, on, train)
        b = _operand_like(*ch.b, dtype, gen, on, train)
        a3 = torch.randn(ch.n, ch.x, ch.z, generator=gen, device=on).to(dtype
                                                                        ).requires_grad_(train)
        b3 = torch.randn(ch.n, ch.z, ch.y, generator=gen, device=on).to(dtype
                                                                        ).requires_grad_(train)
        with _autocast(dev, section, calls):
            # timed in turn: one timed after the other, a burst of other work during the
            # product's alone once made it slower than the pairwise chain, and the blow-up
            # "not faster" (transformer-bloat, the test suite beside a benchmark)
            pairwise, product = _medians_s([partial(_pairwise, a, b, train),
                                            partial(_product, a3, b3, train)],
                                           dev, GEMM_BUDGET_S)
        del a, b, a3, b3
        pattern = _recorded_us(profile, calls, own(group))
        before_us += pattern
        after_us += pattern * product / pairwise
        for c in group:
            made.update(c.copies)
            made.update(c.producers if train else ())
        shapes.append(list(ch.out))
    if before_us <= 0:
        return None
    # The copies go with the fix, and in training the backward of all that made the
    # operands (the sums that an expand's and a repeat's gradients are).
    gone = sorted({i for c in chains for i in c.copies} & made)
    if train:
        gone += backward_nodes(calls, sorted(made))
    before_us += _recorded_us(profile, calls, gone)
    per_step = 1e3 * max(steps, 1)
    return {"before_ms": before_us / per_step, "after_ms": after_us / per_step,
            "shapes": shapes}


def _product(a: Any, b: Any, train: bool = False) -> Any:
    import torch

    out = torch.bmm(a, b)
    if train:
        out.sum().backward()
    return out


def _pairwise(a: Any, b: Any, train: bool = False) -> Any:
    out = (a * b).sum(-1)
    if train:
        out.sum().backward()
    return out


# The fp32-gemm what-if times matrix products only: where convolutions hold more than
# this share of the fp32 GEMM kernels' time, its measurement would stand for theirs too,
# and the finding keeps its estimate instead.
CONV_SHARE_MEASURED = 0.10


def _products_drive(profile: Profile) -> bool:
    from ..analyze.rules.precision import fp32_convolution_share

    return fp32_convolution_share(profile) <= CONV_SHARE_MEASURED


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
    from . import device as devices

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
    from .inductor import compiled_model

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
def anomaly_off() -> Iterator[None]:
    """Autograd's anomaly detection off inside the block, whether the process set it
    (``torch.autograd.set_detect_anomaly(True)``) or the step enters it itself (``with
    torch.autograd.detect_anomaly():``, which calls ``torch.set_anomaly_enabled`` as it
    is entered and left: that call keeps it off inside the block); the mode and the
    function put back after."""
    import torch

    state = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    orig = torch.set_anomaly_enabled

    def kept_off(enabled: bool, check_nan: bool = True) -> None:
        orig(False, check_nan)

    torch.set_anomaly_enabled = kept_off
    orig(False, state[1])
    try:
        yield
    finally:
        torch.set_anomaly_enabled = orig
        orig(*state)


def anomaly_step(device: str, step: Any) -> dict[str, Any] | None:
    """The model's step with anomaly detection off (``anomaly_off``) and as it is, in turn
    (``fixed_step``)."""
    return fixed_step(device, step, anomaly_off, "anomaly-off") if step is not None else None


class _AsUser:
    """The section's inference step as the target's own code runs it (runner._Stepper's
    ``forward_as_user``): a batch, then the forward in the process's grad mode, the
    model's modules in the modes they are in, no inference_mode of the runner's."""

    def __init__(self, step: Any) -> None:
        self._step, self.target, self.mode = step, step.target, step.mode

    def __call__(self) -> None:
        self._step.forward_as_user(self._step.load())


def inference_step(device: str, step: Any) -> dict[str, Any] | None:
    """The inference step as the user's own code runs it (the modules in the modes the
    target handed them over in, ``_Stepper.as_built``; the process's grad mode) and as the
    runner runs it (``torch.inference_mode()`` and ``eval()``: the fix), in turn
    (``fixed_step``). The section's step is the fixed one here (``step_is_fixed``:
    reporter.analyze.savings takes the saving as a share of it). None without the modes
    as built or for a compiled model (it would compile again for the other grad mode)."""
    import torch

    built = getattr(step, "as_built", None)
    if built is None or not _patchable(step):
        return None
    model = step.target.model

    @contextlib.contextmanager
    def as_the_runner_runs_it() -> Iterator[None]:
        now = [(m, m.training) for m, _ in built]
        model.train(False)
        try:
            with torch.inference_mode():
                yield
        finally:
            for m, training in now:
                m.training = training

    now = [(m, m.training) for m, _ in built]
    for m, training in built:
        m.training = training
    try:
        timed = fixed_step(device, _AsUser(step), as_the_runner_runs_it, "inference-mode",
                           in_mode=False)
    finally:
        for m, training in now:
            m.training = training
    timed.pop("faults", None)  # of another step than the one the run counted before
    return {**timed, "step_is_fixed": True}


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

    from . import device as devices

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
    from ..analyze.analyzer import analyze_section

    def asks(rule_id: str) -> bool:
        r = RULES.get(rule_id)
        return r is not None and r.whatif is not None and r.whatif.recipe == "lower-precision"

    made = next((f for f in analyze_section(section).findings if asks(f.rule)), None)
    dtype = made.evidence.get("faster_dtype") if made is not None else None
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


def conv_bias_pairs(step: Any) -> list[Any]:
    """The convolution modules (nn.Conv1d/2d/3d with a bias) whose output one step of the
    model hands straight to a BatchNorm module: hooks see each convolution's output and
    each BatchNorm's input, which are the same tensor where one feeds the other."""
    from torch import nn

    model = step.target.model
    convs = [m for m in model.modules() if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
             and getattr(m, "bias", None) is not None]
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not convs or not norms:
        return []
    made: dict[int, tuple[Any, Any]] = {}  # id(output): (conv, output), kept alive
    found: list[Any] = []

    def conv_out(m: Any, args: Any, out: Any) -> None:
        made[id(out)] = (m, out)

    def norm_in(m: Any, args: Any) -> None:
        conv = made.get(id(args[0])) if args else None
        if conv is not None and conv[1] is args[0] and conv[0] not in found:
            found.append(conv[0])
    hooks = [c.register_forward_hook(conv_out) for c in convs]
    hooks += [n.register_forward_pre_hook(norm_in) for n in norms]
    try:
        with _in_mode(step):
            step()
    finally:
        for h in hooks:
            h.remove()
        made.clear()
    return found


@contextlib.contextmanager
def conv_bias_off(convs: Sequence[Any]) -> Iterator[None]:
    """The convolutions ``convs`` without their bias inside the block (``bias=None``, as a
    model built with ``bias=False`` has them), their bias put back after."""
    saved = [(m, m.bias) for m in convs]
    try:
        for m, _ in saved:
            m.bias = None
        yield
    finally:
        for m, bias in saved:
            m.bias = bias


def conv_bias_step(section: Any, device: str, step: Any) -> dict[str, Any] | None:
    """The model's training step with the bias of each convolution that feeds a
    BatchNorm taken away (``conv_bias_off``) and as it is, in turn (``fixed_step``), with
    how many convolutions that was ("convs"). None outside training (BatchNorm then
    uses its running statistics, which the bias is part of), for a compiled model, or
    where no such convolution is found on the model (a functional convolution, say)."""
    if section.label != "train" or not _patchable(step):
        return None
    convs = conv_bias_pairs(step)
    if not convs:
        return None
    return {**fixed_step(device, step, lambda: conv_bias_off(convs), "conv-bias-off"),
            "convs": len(convs)}


# Steps run with the auto-tuner on before the timing: the first call of each shape times
# cuDNN's algorithms (the cache is the process's, kept after the flag goes off again).
BENCHMARK_WARMUP = 3


@contextlib.contextmanager
def cudnn_benchmark_on() -> Iterator[None]:
    """``torch.backends.cudnn.benchmark`` on inside the block, as it was after."""
    import torch

    was = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = was


def cudnn_benchmark_step(device: str, step: Any) -> dict[str, Any] | None:
    """The model's step with cuDNN's auto-tuner on (``cudnn_benchmark_on``) and as it is,
    in turn (``fixed_step``), after ``BENCHMARK_WARMUP`` steps with it on, which run the
    auto-tuner for each shape. None off a CUDA device (no cuDNN) or for a compiled model.
    To be verified on a GPU: written and tested on the CPU only."""
    from ..model.device import cuda_api

    if not cuda_api(device) or not _patchable(step):
        return None
    with _in_mode(step), cudnn_benchmark_on():
        for _ in range(BENCHMARK_WARMUP):
            step()
    return fixed_step(device, step, cudnn_benchmark_on, "cudnn-benchmark")


@contextlib.contextmanager
def channels_last_on(step: Any) -> Iterator[None]:
    """The model's 4-D parameters and buffers and each batch's 4-D tensors in
    ``torch.channels_last`` inside the block (``_Stepper.cast``), as a user who follows
    channels-last's advice has them; the tensors' own data and the cast put back after
    (the parameters' gradients are dropped: the next step makes them)."""
    import torch

    last = torch.channels_last
    model = step.target.model
    saved: list[tuple[Any, Any]] = []
    for t in [*model.parameters(), *model.buffers()]:
        if t.dim() == 4:
            saved.append((t, t.data))
            t.data = t.data.contiguous(memory_format=last)
    cast = getattr(step, "cast", None)

    def to_last(batch: Any) -> Any:
        batch = cast(batch) if cast is not None else batch
        return tensors_mapped(batch, lambda t: t.contiguous(memory_format=last)
                              if t.dim() == 4 else t)
    step.cast = to_last
    try:
        yield
    finally:
        step.cast = cast
        for t, data in saved:
            t.data = data
            if isinstance(t, torch.nn.Parameter):
                t.grad = None


def channels_last_step(device: str, step: Any) -> dict[str, Any] | None:
    """The model's step in ``torch.channels_last`` (``channels_last_on``) and as it is, in
    turn (``fixed_step``). None for a compiled model. To be verified on a GPU: written
    and tested on the CPU only."""
    if not _patchable(step):
        return None
    return fixed_step(device, step, lambda: channels_last_on(step), "nhwc-layout")


# What attention_switch switches, by the name the report gives it: a transformers model
# running its eager attention (switched to attn_implementation="sdpa"),
# nn.MultiheadAttention asked for its weights (need_weights=True, its default: the
# weights are computed piece by piece; with need_weights=False it calls SDPA), and torch's
# fast path of nn.TransformerEncoderLayer and nn.MultiheadAttention (in inference, batch
# first: aten::_native_multi_head_attention, which on the CPU computes the attention with
# bmm and softmax apart; with the fast path off, the modules call SDPA).
SWITCHES = ("transformers", "need_weights", "fastpath")

# torch's fast-path entry points that nn.TransformerEncoderLayer and nn.MultiheadAttention
# call from Python (torch/nn/modules/transformer.py, activation.py), and their operators
_FAST_PATH = ("_transformer_encoder_layer_fwd", "_native_multi_head_attention")
_FAST_PATH_OPS = tuple(f"aten::{name}" for name in _FAST_PATH)


def _hf_roots(model: Any) -> list[Any]:
    """The transformers models in ``model`` that are in no other (itself, or the
    outermost under a wrapper of the user's), where transformers is loaded."""
    tf = sys.modules.get("transformers")
    base = getattr(tf, "PreTrainedModel", None) if tf is not None else None
    if base is None:
        return []
    roots: list[Any] = []
    inside: set[int] = set()
    for m in model.modules():
        if isinstance(m, base) and id(m) not in inside:
            roots.append(m)
            inside.update(id(x) for x in m.modules())
    return roots


def _hf_configs(config: Any) -> list[Any]:
    """A transformers config and its sub-configs, at any depth."""
    out: list[Any] = []
    todo = [config]
    while todo:
        c = todo.pop()
        if c is None or any(c is o for o in out):
            continue
        out.append(c)
        todo.extend(getattr(c, k, None) for k in getattr(c, "sub_configs", None) or ())
    return out


def _hf_eager(root: Any) -> bool:
    """Whether a transformers model runs its eager attention and can be switched to SDPA
    in place (transformers 4.56 and later: ``set_attn_implementation``)."""
    try:
        return (getattr(root.config, "_attn_implementation", None) == "eager"
                and bool(getattr(root, "_supports_sdpa", False))
                and callable(getattr(root, "set_attn_implementation", None))
                and bool(root._can_set_attn_implementation()))
    except Exception:  # noqa: BLE001 (a model class of the user's that breaks the check)
        return False


@contextlib.contextmanager
def _fast_path_counted(counted: list[int]) -> Iterator[None]:
    """Each call of torch's fast path (``_FAST_PATH``: an nn.TransformerEncoderLayer's or
    an nn.MultiheadAttention's) inside the block counted in ``counted``'s one element."""
    import torch

    originals = {name: getattr(torch, name) for name in _FAST_PATH if hasattr(torch, name)}

    def counting(orig: Any) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            counted[0] += 1
            return orig(*args, **kwargs)
        return call
    try:
        for name, orig in originals.items():
            setattr(torch, name, counting(orig))
        yield
    finally:
        for name, orig in originals.items():
            setattr(torch, name, orig)


@contextlib.contextmanager
def _fast_path_off() -> Iterator[None]:
    """torch's fast path of nn.TransformerEncoderLayer and nn.MultiheadAttention off inside
    the block (``torch.backends.mha.set_fastpath_enabled(False)``), as it was after."""
    import torch

    mha = getattr(torch.backends, "mha", None)
    if mha is None or not hasattr(mha, "set_fastpath_enabled"):
        yield
        return
    was = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(was)


@contextlib.contextmanager
def _sdpa_switched(roots: Sequence[Any], mhas: Sequence[Any],
                   changed: set[str] | None = None, fast: bool = False) -> Iterator[None]:
    """The transformers models ``roots`` on attn_implementation="sdpa" and each
    nn.MultiheadAttention of ``mhas`` called with need_weights=False inside the block,
    and, with ``fast``, torch's fast path of the modules off (``_fast_path_off``); every
    config's implementation, every module's forward and the fast path put back after.
    ``changed`` gets the name (``SWITCHES``) of each switch that changed a call:
    "need_weights" only where a module was called asking for its weights (one called with
    need_weights=False already is not a change the advice may name); "fastpath" is the
    caller's to add, who knows whether the step took the fast path (``attention_step``)."""
    configs = [(c, getattr(c, "_attn_implementation_internal", None))
               for r in roots for m in r.modules() if hasattr(m, "config")
               for c in _hf_configs(m.config)]
    patched: list[tuple[Any, Any]] = []

    def without_weights(forward: Any) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if len(args) > 4:  # query, key, value, key_padding_mask, need_weights, ...
                asked = args[4]
                args = (*args[:4], False, *args[5:])
            else:
                asked = kwargs.get("need_weights", True)
                kwargs["need_weights"] = False
            if asked and changed is not None:
                changed.add(SWITCHES[1])
            return forward(*args, **kwargs)
        return call
    try:
        for r in roots:
            r.set_attn_implementation("sdpa")
        if roots and changed is not None:  # eager, each of them (attention_switch)
            changed.add(SWITCHES[0])
        for m in mhas:
            patched.append((m, m.__dict__.get("forward")))
            m.forward = without_weights(m.forward)
        with _fast_path_off() if fast else contextlib.nullcontext():
            yield
    finally:
        for m, own in reversed(patched):
            if own is None:
                del m.forward
            else:
                m.forward = own
        for c, value in configs:
            c._attn_implementation_internal = value


def attention_switch(model: Any) -> tuple[list[str], Callable[..., Any]] | None:
    """What in ``model`` can be switched to SDPA where it stands (``SWITCHES``: its
    transformers models on eager attention, its nn.MultiheadAttention modules) and the
    fix that switches it (a context manager factory; given a set, ``_sdpa_switched``
    adds to it what the switch changed in the calls made inside), or None: nothing to
    switch."""
    from torch import nn

    roots = [r for r in _hf_roots(model) if _hf_eager(r)]
    mhas = [m for m in model.modules() if isinstance(m, nn.MultiheadAttention)]
    # the fast path takes batch-first modules only (an encoder layer's, its self_attn's)
    fast = [m for m in mhas if m.batch_first]
    names = [n for n, there in zip(SWITCHES, (roots, mhas, fast)) if there]
    if not names:
        return None
    return names, lambda changed=None, off=bool(fast): _sdpa_switched(roots, mhas, changed,
                                                                      off)


@contextlib.contextmanager
def _sdpa_counted(counted: list[int]) -> Iterator[None]:
    """Each call of torch.nn.functional.scaled_dot_product_attention inside the block
    counted in ``counted``'s one element (transformers' SDPA attention and
    nn.MultiheadAttention call it there)."""
    import torch.nn.functional as F

    orig = F.scaled_dot_product_attention

    def sdpa(*args: Any, **kwargs: Any) -> Any:
        counted[0] += 1
        return orig(*args, **kwargs)
    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = orig


def attention_step(device: str, step: Any) -> dict[str, Any] | None:
    """The model's step with its attention switched to SDPA where it stands
    (``attention_switch``) and as it is, in turn (``fixed_step``), with what the switch
    changed in the step's calls ("switched") and the SDPA calls the switch added to a
    step ("calls"). None where nothing can be switched, where the step raises once
    switched (a model that reads the weights it asked for), or where the switch adds no
    SDPA call (the attention that fired is elsewhere): the recorded shapes stand in
    (``attention``)."""
    if not _patchable(step):
        return None
    found = attention_switch(step.target.model)
    if found is None:
        return None
    names, switch = found
    changed: set[str] = set()
    # the fast path off only where the step takes it (an encoder layer in inference):
    # elsewhere the switch would change nothing the advice may name
    fast = SWITCHES[2] in names and _calls_with(step, _fast_path_counted) > 0

    def fix(changed: set[str] | None = None) -> Any:
        return switch(changed, fast)

    @contextlib.contextmanager
    def switched_and_counted(counted: list[int]) -> Iterator[None]:
        with fix(changed), _sdpa_counted(counted):
            yield
    try:
        switched = _calls_with(step, switched_and_counted)
    except Exception:  # noqa: BLE001 (the model reads the weights, say: not its fix)
        return None
    added = switched - _calls_with(step, _sdpa_counted)
    if added <= 0:
        return None
    if fast:
        changed.add(SWITCHES[2])
    # what the switch changed in the step's calls, not all it could switch: a module
    # already called without its weights beside a switched model is not named
    return {**fixed_step(device, step, fix, "attention-sdpa"),
            "switched": [n for n in SWITCHES if n in changed], "calls": added}


class Recorded:
    """The calls of the section's trace (reporter.ingest.traces.host_calls), read once and
    only when a recipe asks for them; an empty list without the trace."""

    def __init__(self, trace: Path | None) -> None:
        self.trace = trace
        self._calls: list[Call] | None = None

    @property
    def calls(self) -> list[Call]:
        if self._calls is None:
            from ..ingest.traces import host_calls

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
