"""Patterns read from the recorded input shapes (``Profile.ops_by_shape``): pure, shared by
the rules and by the replacements the runner times (reporter.collect.whatif)."""

from __future__ import annotations

import ast
import math
from typing import Any

from ..model.profile import Profile

MIN_BLOWUP_NUMEL = 1 << 16  # smaller products are not a blow-up worth reporting or timing
# Copies that make a dense tensor of a view: ``expand(...).contiguous()``,
# ``broadcast_to(...).clone()``.
DENSE_COPIES = ("aten::contiguous", "aten::clone")


def shapes(text: str | None) -> list[Any] | None:
    """A recorded ``input_shapes`` text as a list, or None."""
    try:
        value = ast.literal_eval(text) if text else None
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, list) else None


def dims(o: Any) -> list[list[int]]:
    """An operator row's input shapes that are lists of ints (tensors)."""
    found = shapes(o.input_shapes) or []
    return [d for d in found if isinstance(d, list) and all(type(x) is int for x in d)]


def blowup_shapes(profile: Profile) -> list[list[int]]:
    """The blown-up pairwise products: (..., X, Y, Z) shapes that an ``aten::mul`` makes
    (its inputs broadcast to them) and an ``aten::sum`` reduces over the last dimension,
    the pattern ``(a.unsqueeze(2) * b.unsqueeze(1)).sum(-1)`` that a matrix product
    computes without materialising; the most time first."""
    sums = {tuple(d[0]) for o in profile.ops_by_shape if o.name == "aten::sum"
            for d in [dims(o)] if d and len(d[0]) >= 4}
    found: dict[tuple[int, ...], float] = {}
    for o in profile.ops_by_shape:
        d = dims(o) if o.name == "aten::mul" else []
        if len(d) < 2 or len(d[0]) != len(d[1]) or len(d[0]) < 4:
            continue
        out = tuple(max(a, b) for a, b in zip(d[0], d[1]))
        if out in sums and math.prod(out) >= MIN_BLOWUP_NUMEL:
            found[out] = found.get(out, 0.0) + (o.device_total_us or o.cpu_total_us)
    return [list(k) for k in sorted(found, key=lambda k: found[k], reverse=True)]


def dense_copies(profile: Profile, blown: list[list[int]], attr: str
                 ) -> tuple[float, list[str]]:
    """The inclusive time (``attr``) of the copies that make the blown-up operands dense:
    ``contiguous``/``clone`` of a tensor of one of the ``blown`` shapes (an expanded or
    permuted view), and the names of those copies. A ``clone`` inside a ``contiguous`` is
    counted once: only the clones' time beyond the contiguous calls' is added."""
    wanted = {tuple(s) for s in blown}
    time = {name: 0.0 for name in DENSE_COPIES}
    for o in profile.ops_by_shape:
        if o.name in time:
            d = dims(o)
            if d and tuple(d[0]) in wanted:
                time[o.name] += float(getattr(o, attr) or 0.0)
    contiguous, clone = time["aten::contiguous"], max(0.0, time["aten::clone"] -
                                                      time["aten::contiguous"])
    names = [n for n, us in (("aten::contiguous", contiguous), ("aten::clone", clone)) if us > 0]
    return contiguous + clone, names
