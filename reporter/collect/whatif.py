"""Advice timed on the device: the replacement a finding proposes, at the recorded shapes.

When the runner has the device at hand and a finding's fix is an operator
replacement, it times the operators as the model ran them and their
replacement at the shapes and dtype the profile recorded, on the same device
(warm-up, synchronised, the median of repeats, a fraction of a second each).
The result, per step, is stored in the run (``Section.whatif``) and the report
says "measured here: X -> Y"; reporter.analyze.savings takes it over its estimate, and
a replacement that is not faster here is not given as a main problem.

Measured now: unfused attention (bmm/matmul + softmax + bmm/matmul) against
``scaled_dot_product_attention``, forward (and backward for a training step);
a per-parameter optimizer step against the same optimizer with ``foreach=True`` and
``fused=True`` (where it has one), on copies of the model's parameters and gradients;
fp32 matrix products (mm, addmm, bmm, baddbmm) against the same products in bf16
and in TF32, at the shapes that hold most of their time, the speed-up applied to
their recorded time (the casts that autocast adds are not counted: for weights it
caches them within a step); a blown-up pairwise product (repeat, then mul and sum over the last
dimension) against the matrix product that computes it, likewise.

Each rule names its recipe where it is registered (reporter.analyze.findings.WhatIf);
``RECIPES`` holds them by name, and ``timeable`` says which findings have one.
"""

from __future__ import annotations

import inspect
import math
import statistics
import time
from functools import partial
from typing import Any, Callable, Iterable

from .. import memory
from ..analyze.findings import RULES, Finding
from ..analyze.profile import Profile
from ..analyze.shapes import blowup_shapes, dense_copies
from ..analyze.shapes import dims as _dims
from ..analyze.shapes import shapes as _shapes

SOFTMAX = ("aten::_softmax", "aten::softmax")
PRODUCTS = ("aten::bmm", "aten::matmul")
BUDGET_S = 0.3  # per variant


def attention_shapes(profile: Profile) -> dict[str, Any] | None:
    """The unfused attention's shapes: the softmax over scores (..., L, S) that took the
    most time, and the products around it: q (N, L, E), k (N, S, E), v (N, S, Ev), N the
    product of the scores' batch dimensions (``batch``). And the rest of the chain as the
    profile recorded it, which the fused kernel does away with too: the scaling of the
    scores (``scale``: the ``aten::div`` or ``aten::mul`` of a scores-shaped tensor by a
    scalar), the masked calls (``masked``: an ``aten::masked_fill`` of the scores, per
    forward call; ``causal`` when an ``aten::triu``/``tril`` of the mask's shape built it)
    and which operands the products copied to make them dense (``copies``: q, k, v; an
    ``aten::clone`` of a view of their shape, as ``matmul`` makes of a transposed head)."""
    rows = sorted((o for o in profile.ops_by_shape if o.name in SOFTMAX),
                  key=lambda o: o.cpu_total_us + o.device_total_us, reverse=True)
    for soft in rows:
        dims = _shapes(soft.input_shapes)
        if not dims or not isinstance(dims[0], list) or len(dims[0]) < 3:
            continue
        *batch, lq, ls = dims[0]
        n = math.prod(batch)
        e = ev = None
        for o in profile.ops_by_shape:
            d = _shapes(o.input_shapes) if o.name in PRODUCTS else None
            if not d or len(d) < 2 or not all(isinstance(x, list) and len(x) >= 3 for x in d[:2]):
                continue
            a, b = d[0], d[1]
            if math.prod(a[:-2]) != n:
                continue
            if a[-2:-1] == [lq] and b[-1] == ls and a[-1] == b[-2]:
                e = a[-1]  # q @ k^T
            elif a[-2:] == [lq, ls] and b[-2] == ls:
                ev = b[-1]  # p @ v
        if e:
            return {"n": n, "l": lq, "s": ls, "e": e, "ev": ev or e, "calls": soft.calls,
                    "batch": list(batch),
                    **_attention_chain(profile, list(dims[0]), e, ev or e, soft.calls)}
    return None


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


class Skipped(Exception):
    """A replacement not timed on purpose (its operands would not fit): why."""


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


def _autocast(dev: Any, section: Any) -> Any:
    """The autocast the section's model ran under, for timing its replacements alike."""
    import contextlib

    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
        (getattr(section, "precision", None) or {}).get("autocast") or "")
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(dev.tensor_device.split(":")[0], dtype=dtype)


def _generator(dev: Any) -> Any:
    """A seeded generator on the device the operands are drawn on (a CPU draw of a large
    operand is serial: seconds)."""
    import torch

    return torch.Generator(device=dev.tensor_device).manual_seed(0)


def attention(profile: Profile, device: str, train: bool, steps: int,
              section: Any = None) -> dict[str, Any] | None:
    """Unfused attention and scaled_dot_product_attention timed at the recorded shapes,
    under the autocast the model ran under: {"before_ms", "after_ms"} per step, or None
    when the shapes cannot be read. The unfused chain is timed as recorded: its scaling
    of the scores, the masked calls (their mask built each call when a triangle was, and
    the fused kernel told ``is_causal``), and the copies that made transposed operands
    dense; the fused kernel is given the same operands, views as they are."""
    import torch
    from torch.nn import functional as F

    from . import device as devices

    shape = attention_shapes(profile)
    if shape is None:
        return None
    n, lq, ls, e, ev = shape["n"], shape["l"], shape["s"], shape["e"], shape["ev"]
    # q, k, v, and the scores with their scaled and softmaxed copies; twice in training
    need = 4 * (n * lq * e + n * ls * e + n * ls * ev + 3 * n * lq * ls) * (2 if train else 1)
    free = memory.available()
    cap = min(MAX_OPERANDS_B, free // 2 if free is not None else MAX_OPERANDS_B)
    if need > cap:
        raise Skipped(f"attention at the recorded shapes would allocate {need:,} bytes, over "
                      f"the cap of {cap:,}")
    dev = devices.get(device)
    gen = _generator(dev)
    batch = shape.get("batch") or [n]
    copies = set(shape.get("copies") or ())

    def make(name: str, rows: int, cols: int) -> Any:
        """An operand (*batch, rows, cols); where the model's was a view that its product
        copied, one as heads split off a (batch, rows, heads, cols) tensor are: rows and
        heads transposed, so that folding the batch dimensions copies it."""
        if name in copies:
            t = torch.randn(batch[0], rows, *batch[1:], cols, generator=gen,
                            device=dev.tensor_device).requires_grad_(train)
            return t.movedim(1, -2)
        t = torch.randn(*batch, rows, cols, generator=gen, device=dev.tensor_device)
        return t.requires_grad_(train)
    q, k, v = make("q", lq, e), make("k", ls, e), make("v", ls, ev)
    k_t = k.transpose(-1, -2)  # as the product reads it
    scale = 1 / math.sqrt(e)
    causal = bool(shape.get("causal"))
    given = torch.rand(lq, ls, generator=gen, device=dev.tensor_device) < 0.1

    def mask() -> Any:
        if causal:  # built each call, as the recorded triangle was
            return torch.ones(lq, ls, dtype=torch.bool, device=dev.tensor_device).triu(1)
        return given

    def unfused(masked: bool) -> None:
        scores = torch.bmm(q.reshape(n, lq, e), k_t.reshape(n, e, ls)).view(*batch, lq, ls)
        if shape.get("scale") == "aten::div":
            scores = scores / math.sqrt(e)
        else:
            scores = scores * scale
        if masked:
            scores = scores.masked_fill(mask(), float("-inf"))
        p = torch.softmax(scores, -1).reshape(n, lq, ls)
        out = torch.bmm(p, v.reshape(n, ls, ev))
        if train:
            out.sum().backward()

    def fused(masked: bool) -> None:
        if masked and causal:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif masked:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=~given)
        else:
            out = F.scaled_dot_product_attention(q, k, v)
        if train:
            out.sum().backward()
    calls = shape["calls"]
    masked_calls = min(int(shape.get("masked") or 0), calls)
    before = after = 0.0
    with _autocast(dev, section):
        for masked, count in ((False, calls - masked_calls), (True, masked_calls)):
            if count:
                before += count * _median_s(partial(unfused, masked), dev)
                after += count * _median_s(partial(fused, masked), dev)
    per_step = 1e3 / max(steps, 1)
    return {"before_ms": before * per_step, "after_ms": after * per_step,
            "shape": [shape["n"], shape["l"], shape["s"], shape["e"]],
            "calls_per_step": calls / max(steps, 1), "masked_per_step":
            masked_calls / max(steps, 1), "causal": causal, "copies": sorted(copies)}


# Copies of parameters and gradients past this size are not made for a what-if.
MAX_COPY_B = 1 << 30


def optimizer_foreach(optimizer: Any, device: str) -> dict[str, Any] | None:
    """The optimizer's step as configured (one parameter at a time), with
    ``foreach=True`` and, where the optimizer has one for this device, ``fused=True``,
    each on its own copy of the parameters and their gradients; the faster of the two
    is the "after" (``variant`` says which)."""
    import torch

    params = [p for g in optimizer.param_groups for p in g["params"]]
    if not params or sum(p.numel() * p.element_size() for p in params) * 2 > MAX_COPY_B:
        return None
    cls, defaults = type(optimizer), dict(optimizer.defaults)
    if "foreach" not in defaults:
        return None  # an optimizer without a foreach implementation
    from . import device as devices

    dev = devices.get(device)
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


def gemm_shapes(profile: Profile) -> tuple[list[tuple[Any, list[int], list[int]]], float]:
    """The matrix products' shapes that hold most of their time, most first: [(the
    recorded row, a, b)], and the products' recorded time in all (us)."""
    rows = sorted((o for o in profile.ops_by_shape if o.name in GEMMS),
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
                              * math.prod(a[:-2])) * 4 > MAX_OPERANDS_B:
            continue
        out.append((o, a, b))
        covered += _gemm_time_us(o)
    return out, total


def gemm_precision(profile: Profile, device: str, steps: int) -> dict[str, Any] | None:
    """What bf16 and TF32 make of the fp32 matrix products. Each of the shapes that hold
    most of their time is timed here in fp32 (TF32 as the model had it), in bf16 and in
    TF32; the speed-up measured at each shape applies to its recorded time, and their
    time-weighted mean to the products whose shapes were not timed. The recorded time,
    not the timed one, is the "before": in a training step many products run on
    transposed operands, which the kernels handle more slowly than the contiguous ones
    timed here. {"before_ms", "after_ms" (bf16), "tf32_ms"} per step, the shapes timed
    and the share of the products' time they hold; None when no shape can be read."""
    import torch

    from . import device as devices

    shapes, total_us = gemm_shapes(profile)
    if not shapes or total_us <= 0:
        return None
    dev = devices.get(device)
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
    return {"before_ms": per_step_ms, "after_ms": per_step_ms * bf16_us / timed_us,
            "tf32_ms": per_step_ms * tf32_us / timed_us, "shapes": len(shapes),
            "cover": timed_us / total_us}


BLOWUP_SHAPES = 3  # pairwise shapes timed at most
MATERIALISERS = ("aten::repeat", "aten::repeat_interleave")


def _pairwise(a: Any, b: Any) -> Any:
    return (a * b).sum(-1)


def _broadcasts_to(shape: tuple[int, ...], dims: list[Any]) -> bool:
    """Whether a recorded mul's two operands broadcast to ``shape``."""
    return (len(dims) >= 2 and len(dims[0]) == len(dims[1])
            and tuple(max(p, q) for p, q in zip(dims[0], dims[1])) == shape)


def _operand_of(shapes: list[list[int]], dims: list[Any]) -> bool:
    """Whether a recorded repeat's input is an operand of one of the pairwise ``shapes``:
    of its rank, every dimension the shape's or 1 (it broadcasts to it). A repeat of
    anything else (a GQA model's key and value heads) is not the pattern's."""
    if not dims or not isinstance(dims[0], list):
        return False
    x = dims[0]
    return any(len(x) == len(s) and x != list(s) and all(p in (1, q) for p, q in zip(x, s))
               for s in shapes)


def _sums(shape: tuple[int, ...], dims: list[Any]) -> bool:
    """Whether a recorded sum reduces a tensor of ``shape``."""
    return bool(dims) and tuple(dims[0]) == shape


def blowup_matmul(profile: Profile, device: str, steps: int) -> dict[str, Any] | None:
    """The blown-up pairwise products against the matrix product that computes them: at
    each recorded (..., X, Y, Z) shape, ``(a * b).sum(-1)`` on materialised operands is
    timed against ``bmm`` of (..., X, Z) by (..., Z, Y). Each shape's ratio applies to the
    recorded time of its ``mul`` and ``sum`` calls; the ``repeat`` copies that materialise
    the operands go. {"before_ms", "after_ms"} per step, the recorded time of those
    operators and what the products would take; None without the pattern."""
    import torch

    from . import device as devices

    shapes = blowup_shapes(profile)[:BLOWUP_SHAPES]
    if not shapes:
        return None
    dev = devices.get(device)
    gen = _generator(dev)
    on = dev.tensor_device

    def recorded(names: tuple[str, ...], match: Callable[[list[Any]], bool]) -> float:
        return sum(o.device_total_us or o.cpu_total_us for o in profile.ops_by_shape
                   if o.name in names and match(_dims(o)))
    before_us = after_us = 0.0
    for shape in shapes:
        *batch, x, y, z = shape
        n = math.prod(batch)
        if 2 * math.prod(shape) * 4 > MAX_OPERANDS_B:
            continue
        a = torch.randn(n, x, y, z, generator=gen, device=on)
        b = torch.randn(n, x, y, z, generator=gen, device=on)
        a3 = torch.randn(n, x, z, generator=gen, device=on)
        b3 = torch.randn(n, z, y, generator=gen, device=on)
        pairwise = _median_s(partial(_pairwise, a, b), dev, GEMM_BUDGET_S)
        product = _median_s(partial(torch.bmm, a3, b3), dev, GEMM_BUDGET_S)
        del a, b, a3, b3
        t = tuple(shape)
        pattern = (recorded(("aten::mul",), partial(_broadcasts_to, t))
                   + recorded(("aten::sum",), partial(_sums, t)))
        before_us += pattern
        after_us += pattern * product / pairwise
    if before_us <= 0:
        return None
    # the copies that materialise it: repeat, and expand(...).contiguous() of its shapes
    before_us += recorded(MATERIALISERS, partial(_operand_of, shapes)) + dense_copies(
        profile, shapes, "device_total_us" if profile.has_device else "cpu_total_us")[0]
    per_step = 1e3 * max(steps, 1)
    return {"before_ms": before_us / per_step, "after_ms": after_us / per_step,
            "shapes": [list(s) for s in shapes]}


# The fp32-gemm what-if times matrix products only: where convolutions hold more than
# this share of the fp32 GEMM kernels' time, its measurement would stand for theirs too,
# and the finding keeps its estimate instead.
CONV_SHARE_MEASURED = 0.10


def _products_drive(profile: Profile) -> bool:
    from ..analyze.rules import fp32_convolution_share

    return fp32_convolution_share(profile) <= CONV_SHARE_MEASURED


Recipe = Callable[[Any, str, Any, int], "dict[str, Any] | None"]

# The replacements by recipe name, as rules name them (reporter.analyze.findings.WhatIf):
# each takes the section, the device, the target's optimizer and the profiled steps.
RECIPES: dict[str, Recipe] = {
    "attention": lambda section, device, optimizer, steps: attention(
        section.profile, device, section.label == "train", steps, section),
    "optimizer": lambda section, device, optimizer, steps: optimizer_foreach(
        optimizer, device) if optimizer is not None and section.label == "train" else None,
    "gemm-precision": lambda section, device, optimizer, steps: gemm_precision(
        section.profile, device, steps) if _products_drive(section.profile) else None,
    "blowup-matmul": lambda section, device, optimizer, steps: blowup_matmul(
        section.profile, device, steps),
}


def timeable(findings: list[Finding]) -> list[str]:
    """The ids of the findings whose rule has a replacement to time, in rule order."""
    ids = {f.rule for f in findings}
    return [r.id for r in sorted(RULES.values(), key=lambda r: r.order)
            if r.id in ids and r.whatif is not None]


def measure(section: Any, rules: Iterable[str], device: str,
            optimizer: Any = None, skipped: dict[str, str] | None = None
            ) -> dict[str, dict[str, Any]]:
    """The replacements of ``rules`` (ids of the section's findings) that their rules name
    and that can be timed here, in rule order; ``optimizer``, the target's, for a
    training step. Those skipped on purpose go into ``skipped`` (rule id: why)."""
    out: dict[str, dict[str, Any]] = {}
    b = section.profile.breakdown
    steps = len(b.steps_us) if b is not None and b.steps_us else max(section.profile.steps, 1)
    wanted = set(rules)
    for rule in sorted(RULES.values(), key=lambda r: r.order):
        if rule.id not in wanted or rule.whatif is None:
            continue
        try:
            timed = RECIPES[rule.whatif.recipe](section, device, optimizer, steps)
        except Skipped as exc:
            if skipped is not None:
                skipped[rule.id] = str(exc)
            continue
        if timed is not None:
            out[rule.id] = timed
    return out
