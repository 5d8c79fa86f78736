"""The matrix products' what-ifs at the recorded shapes: fp32 products against bf16 and
TF32 (``gemm_precision``), and a blown-up pairwise product against the matrix product that
computes it (``blowup_matmul``)."""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Iterable

from ...analyze.shapes import BACKWARD_NODE, REDUCED, Call, Chain, backward_nodes, blowup_chains
from ...analyze.shapes import shapes as _shapes
from ...model.profile import Profile
from .timing import MAX_OPERANDS_B, _autocast, _cap, _generator, _median_s, _medians_s


# Matrix operators and the positions of their two factors in the recorded inputs.
GEMMS = {"aten::mm": (0, 1), "aten::bmm": (0, 1), "aten::addmm": (1, 2),
         "aten::baddbmm": (1, 2)}
GEMM_COVER = 0.9  # time the shapes that hold this share of the products' time
GEMM_SHAPES = 8  # and no more shapes than this
GEMM_BUDGET_S = 0.05  # per shape and variant


def _gemm_time_us(o: Any) -> float:
    return float(o.device_total_us or o.cpu_total_us)


def reduced_rows(profile: Profile, calls: list[Call] | None) -> set[tuple[str, Any]]:
    """The (name, input shapes) rows of the matrix products whose recorded calls ran on
    bf16 or fp16 operands (autocast, or a model in that dtype): most of their calls, by
    the trace's input types."""
    if not calls:
        return set()
    from ...analyze.timeline import shape_key

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

    from .. import device as devices

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

    from ...analyze.shapes import contiguous_strides

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
    from ...analyze.timeline import shape_key

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

    from .. import device as devices

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
    from ...analyze.rules.precision import fp32_convolution_share

    return fp32_convolution_share(profile) <= CONV_SHARE_MEASURED
