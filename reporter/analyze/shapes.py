"""Patterns read from the recorded input shapes (``Profile.ops_by_shape``): pure, shared by
the rules and by the replacements the runner times (reporter.collect.whatif)."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
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


def _broadcast(d: list[list[int]]) -> list[int] | None:
    """The shape tensors of shapes ``d`` broadcast to, or None where they do not."""
    rank = max(len(x) for x in d)
    padded = [[1] * (rank - len(x)) + x for x in d]
    out = [max(col) for col in zip(*padded)]
    if any(n not in (1, m) for x in padded for n, m in zip(x, out)):
        return None
    return out


def _widens(small: list[int], big: list[int]) -> bool:
    """Whether ``big`` is ``small`` broadcast along a dimension of size 1 (or a new leading
    one) to a larger size: what ``unsqueeze(...).repeat(...)`` materialises."""
    if len(small) > len(big):
        return False
    padded = [1] * (len(big) - len(small)) + small
    return all(n in (1, m) for n, m in zip(padded, big)) and padded != big


# Copies that materialise a broadcast tensor outright.
_BROADCAST_COPIES = ("aten::repeat", "aten::repeat_interleave", "aten::tile",
                     "aten::expand_copy")


def pairwise_shapes(profile: Profile, names: set[str] | frozenset[str]
                    ) -> set[tuple[int, ...]]:
    """The shapes of the pairwise tensors the recorded input shapes show, of
    ``MIN_BLOWUP_NUMEL`` elements or more: the result of an operator of ``names``
    (element-wise) whose inputs broadcast to a tensor larger than each of them
    (``a.unsqueeze(2) * b.unsqueeze(1)``, (B, L, 1, D) by (B, 1, S, D)); and an input of
    such an operator that a copy made from a broadcast (``repeat``, ``tile``: (B, 1, S, D)
    repeated to (B, L, S, D)), or that a multiply-then-sum reads and a ``contiguous`` or
    ``clone`` made dense (``expand(...).contiguous()``). Structural, not a share: an
    activation computed from one tensor (``x * torch.sigmoid(1.702 * x)``, CLIP's
    quick_gelu; SiLU; GELU written out), a bias or a mask added, a tensor scaled by a
    broadcast vector, all make a result no larger than their largest input from nothing
    copied, and show none."""
    found: set[tuple[int, ...]] = set()
    inputs: set[tuple[int, ...]] = set()
    sources: list[list[int]] = []  # what the broadcast copies were made from
    dense: set[tuple[int, ...]] = set()
    for o in profile.ops_by_shape:
        d = [x for x in dims(o) if x]
        if o.name in names:
            inputs.update(tuple(x) for x in d if math.prod(x) >= MIN_BLOWUP_NUMEL)
            out = _broadcast(d) if len(d) >= 2 else None
            if out is not None and math.prod(out) >= MIN_BLOWUP_NUMEL and all(
                    math.prod(out) > math.prod(x) for x in d):
                found.add(tuple(out))
        elif d and o.name in _BROADCAST_COPIES:
            sources.append(d[0])
        elif d and o.name in DENSE_COPIES:
            dense.add(tuple(d[0]))
    # a multiply-then-sum (blowup_shapes) of an operand a copy made dense: expand(...)
    # .contiguous() (the expand's row, a view's, tells nothing by shape: a mask that
    # masked_fill broadcasts is expanded too)
    summed = {tuple(x) for x in blowup_shapes(profile)}
    for s in inputs:
        if any(_widens(r, list(s)) for r in sources) or (s in dense and s in summed):
            found.add(s)
    return found


def on_shapes(profile: Profile, names: set[str] | frozenset[str],
              wanted: set[tuple[int, ...]], attr: str) -> tuple[float, float]:
    """The time (``attr``) of the operators ``names`` by recorded shape: of the rows that
    read or make a tensor of one of the ``wanted`` shapes, and of all their rows."""
    own = every = 0.0
    for o in profile.ops_by_shape:
        if o.name not in names:
            continue
        t = float(getattr(o, attr) or 0.0)
        every += t
        d = [x for x in dims(o) if x]
        out = _broadcast(d) if d else None
        if any(tuple(x) in wanted for x in d) or (out is not None and tuple(out) in wanted):
            own += t
    return own, every


def copies_of(profile: Profile, wanted: set[tuple[int, ...]], attr: str) -> float:
    """The time (``attr``, inclusive) of the copies that materialise a broadcast into one
    of the ``wanted`` shapes (``repeat``, ``tile`` of a tensor that widens to it)."""
    return sum(float(getattr(o, attr) or 0.0) for o in profile.ops_by_shape
               if o.name in _BROADCAST_COPIES
               for d in [dims(o)] if d and any(_widens(d[0], list(s)) for s in wanted))


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


# --- The recorded sequence of calls (reporter.ingest.traces.host_calls) --------------------

@dataclass(slots=True)
class Call:
    """One host call of a trace, in the order the thread made them: its inputs as
    recorded (shapes, strides, types, concrete values) and the index of the call that
    encloses it (None at the top)."""

    name: str
    thread: int
    start: float
    end: float
    parent: int | None = None
    op: bool = True  # an operator (not a mark or a runtime call)
    dims: Any = None
    strides: Any = None
    types: Any = None
    concrete: Any = None
    seq: int | None = None  # autograd's sequence number: a forward call <-> its backward node

    def tensor(self, i: int) -> tuple[list[int], list[int] | None] | None:
        """Input ``i`` as (shape, strides) when it is a tensor, else None."""
        if not isinstance(self.dims, list) or i >= len(self.dims):
            return None
        d = self.dims[i]
        if not isinstance(d, list) or not all(type(x) is int for x in d):
            return None
        if isinstance(self.types, list) and i < len(self.types) and \
                self.types[i] in ("Scalar", "ScalarList", "TensorList", ""):
            return None
        s = self.strides[i] if isinstance(self.strides, list) and i < len(self.strides) else None
        ok = isinstance(s, list) and len(s) == len(d) and all(type(x) is int for x in s)
        return d, (s if ok else None)

    def value(self, i: int) -> str | None:
        """Input ``i``'s recorded concrete value (a scalar or a list, as text), or None."""
        if isinstance(self.concrete, list) and i < len(self.concrete):
            v = self.concrete[i]
            return v if isinstance(v, str) and v else None
        return None

    def dtype(self, i: int = 0) -> str | None:
        """Input ``i``'s element type as torch names it in traces ("float",
        "c10::BFloat16", "c10::Half"), or None."""
        if isinstance(self.types, list) and i < len(self.types):
            t = self.types[i]
            return t if isinstance(t, str) and t else None
        return None


def next_sibling(calls: list[Call], i: int) -> int | None:
    """The index of the operator the same caller called right after ``calls[i]`` returned
    (on its thread, under the same enclosing call), or None: a mark, a return from the
    caller, or the end of the thread come first."""
    c = calls[i]
    for j in range(i + 1, len(calls)):
        n = calls[j]
        if n.thread != c.thread:
            return None
        if n.start < c.end:
            continue  # inside it
        return j if n.parent == c.parent and n.op else None
    return None


# Operators that make a dense copy of their input at a larger or permuted shape: the
# producers of a materialised operand.
_MATERIALISERS = {"aten::repeat", "aten::repeat_interleave", "aten::tile", "aten::expand_copy",
                  "aten::contiguous", "aten::clone", "aten::expand", "aten::permute",
                  "aten::unsqueeze"}


def _int_list(text: str | None) -> list[int] | None:
    v = shapes(text) if text and text.startswith("[") else None
    return v if v is not None and all(type(x) is int for x in v) else None


def _produced(c: Call) -> tuple[list[int], set[int]] | None:
    """The shape a view or copy call makes, and which of its dimensions repeat one value
    (broadcast: a size-1 or stride-0 dimension of its input, expanded or repeated), or
    None where the call is not one whose output the trace tells."""
    t = c.tensor(0)
    if t is None:
        return None
    shape, strides = t
    same = {i for i, n in enumerate(shape) if n == 1 or (strides is not None and
                                                          strides[i] == 0)}
    if c.name in ("aten::contiguous", "aten::clone"):
        return list(shape), same
    if c.name in ("aten::expand", "aten::expand_copy"):
        size = _int_list(c.value(1))
        if not size or len(size) < len(shape):
            return None
        lead = len(size) - len(shape)
        out = [s if s != -1 else shape[i - lead] for i, s in enumerate(size)]
        return out, set(range(lead)) | {i + lead for i in same}
    if c.name in ("aten::repeat", "aten::tile"):
        reps = _int_list(c.value(1))
        if not reps or len(reps) < len(shape):
            return None
        lead = len(reps) - len(shape)
        padded = [1] * lead + list(shape)
        return ([p * r for p, r in zip(padded, reps)],
                set(range(lead)) | {i + lead for i in same})
    if c.name == "aten::permute":
        order = _int_list(c.value(1))
        if not order or len(order) != len(shape):
            return None
        order = [o % len(shape) for o in order]
        return [shape[o] for o in order], {i for i, o in enumerate(order) if o in same}
    if c.name == "aten::unsqueeze":
        try:
            dim = int(c.value(1) or "")
        except ValueError:
            return None
        dim = dim % (len(shape) + 1)
        out = list(shape[:dim]) + [1] + list(shape[dim:])
        return out, {i if i < dim else i + 1 for i in same} | {dim}
    return None


# How far back a materialised operand's producers are looked for among the caller's calls.
_PRODUCER_LOOKBACK = 12
_COPIES = ("aten::repeat", "aten::repeat_interleave", "aten::tile", "aten::expand_copy",
           "aten::contiguous", "aten::clone")


def _operand(calls: list[Call], i: int, k: int) -> tuple[
        list[int], list[int] | None, set[int], list[int], list[int]] | None:
    """Input ``k`` of ``calls[i]``: its shape, recorded strides, the dimensions along which
    it repeats one value (size 1, stride 0, or made so by the expand/repeat/permute/
    contiguous calls the same caller made just before, each found as the latest call whose
    output has the shape wanted), and the indexes of the copies among those calls (repeat,
    contiguous, clone: what materialised it), and of every producer (the views too)."""
    t = calls[i].tensor(k)
    if t is None:
        return None
    shape, strides = t
    same = {d for d, n in enumerate(shape) if n == 1 or (strides is not None and
                                                         strides[d] == 0)}
    copies: list[int] = []
    views: list[int] = []  # every producer, the views (expand, permute) too
    want, want_strides = list(shape), strides
    to_operand = list(range(len(shape)))  # a dimension of ``want`` -> the operand's
    parent, thread, seen = calls[i].parent, calls[i].thread, 0
    for j in range(i - 1, -1, -1):
        c = calls[j]
        if c.thread != thread or j == parent or seen >= _PRODUCER_LOOKBACK:
            break
        if c.parent != parent or not c.op:
            continue  # inside an earlier call, or a mark
        seen += 1
        made = _produced(c) if c.name in _MATERIALISERS else None
        if made is None or made[0] != want or (
                c.name in _COPIES and want_strides is not None
                and want_strides != contiguous_strides(want)):
            continue  # not its shape; or a copy, whose output is dense, for a view
        same |= {to_operand[d] for d in made[1] if d < len(to_operand)}
        views.append(j)
        if c.name in _COPIES:
            copies.append(j)
        src = c.tensor(0)
        if src is None or c.name not in ("aten::contiguous", "aten::clone", "aten::permute"):
            break  # made from a smaller tensor (expand, repeat, unsqueeze): known now
        if c.name == "aten::permute":
            order = [o % len(want) for o in (_int_list(c.value(1)) or [])]
            to_operand = [to_operand[order.index(d)] for d in range(len(order))]
        want, want_strides = list(src[0]), src[1]
    return shape, strides, same, copies, views


def contiguous_strides(shape: list[int]) -> list[int]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return out[::-1]


@dataclass
class Chain:
    """A blown-up pairwise product as the model ran it: ``aten::mul`` of two operands that
    each repeat one value along a dimension the other varies in (so the product holds
    X x Y x Z values for X x Z + Z x Y inputs), whose output the next call, an
    ``aten::sum`` over the last dimension, reduces. A matrix product computes it as
    (n, x, z) @ (n, z, y) without the blown-up tensor."""

    mul: int  # the calls' indexes
    sum: int
    out: list[int]
    a: tuple[list[int], list[int] | None]  # the mul's operands as recorded: shape, strides
    b: tuple[list[int], list[int] | None]
    n: int
    x: int
    z: int
    y: int
    copies: list[int] = field(default_factory=list)  # what materialised the operands
    producers: list[int] = field(default_factory=list)  # the copies and views that made them

    @property
    def key(self) -> tuple[int, ...]:
        return (self.n, self.x, self.z, self.y)


def blowup_chains(calls: list[Call]) -> list[Chain]:
    """The blown-up pairwise products of a trace's calls (see Chain): the mul's output is
    what the sum next to it reads (the same caller, the next call, the mul's output shape,
    reduced over the last dimension), and the product is a matrix product: the reduced
    dimension varies in both operands, and each operand repeats along a dimension the other
    varies in. A broadcast multiply that some other sum reads, or one whose operand
    already holds the whole output (a scan's state times a broadcast vector), is not one."""
    out: list[Chain] = []
    for i, c in enumerate(calls):
        if c.name != "aten::mul" or not c.op:
            continue
        a, b = _operand(calls, i, 0), _operand(calls, i, 1)
        if a is None or b is None or len(a[0]) != len(b[0]) or len(a[0]) < 3:
            continue
        if any(p != q and 1 not in (p, q) for p, q in zip(a[0], b[0])):
            continue
        shape = [max(p, q) for p, q in zip(a[0], b[0])]
        si = next_sibling(calls, i)
        s = calls[si] if si is not None else None
        summed = s.tensor(0) if s is not None else None
        if si is None or s is None or s.name != "aten::sum" or summed is None \
                or summed[0] != shape:
            continue
        r = len(shape)
        reduced = _int_list(s.value(1))
        if reduced is None or [d % r for d in reduced] != [r - 1]:
            continue
        last = r - 1
        a_same, b_same = a[2], b[2]
        if last in a_same or last in b_same:
            continue  # one operand is constant along the sum: not a product of two
        x_dims = [d for d in range(last) if d in b_same and d not in a_same]
        y_dims = [d for d in range(last) if d in a_same and d not in b_same]
        batch = [d for d in range(last) if d not in a_same and d not in b_same]
        if not x_dims or not y_dims:
            continue  # an operand already holds the whole output: nothing is blown up
        n = math.prod(shape[d] for d in batch)
        x = math.prod(shape[d] for d in x_dims)
        y = math.prod(shape[d] for d in y_dims)
        out.append(Chain(mul=i, sum=si, out=shape, a=(a[0], a[1]),
                         b=(b[0], b[1]), n=n, x=x, z=shape[last], y=y,
                         copies=sorted(set(a[3]) | set(b[3])),
                         producers=sorted(set(a[4]) | set(b[4]))))
    return out


# Element types of the recorded inputs, as torch writes them in traces.
REDUCED = {"c10::BFloat16": "bf16", "c10::Half": "fp16"}
MATRIX_CALLS = ("aten::linear", "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm",
                "aten::baddbmm", "aten::conv1d", "aten::conv2d", "aten::conv3d",
                "aten::convolution", "aten::_convolution", "aten::einsum")
# torch's ScalarType numbers of the dtypes autocast casts to.
_CAST_TO = {"15": "bf16", "5": "fp16"}


def recorded_autocast(calls: list[Call]) -> str | None:
    """The autocast the calls ran under, wherever it was entered (around the step or inside
    the model's forward): a matrix operator called on fp32 inputs that casts them to bf16
    (fp16) and calls itself again in that dtype, which is what autocast's dispatch records.
    The dtype most of those casts went to, or None."""
    seen: dict[str, int] = {}
    for c in calls:
        if c.name not in ("aten::to", "aten::_to_copy") or c.parent is None:
            continue
        p = calls[c.parent]
        if p.name not in MATRIX_CALLS or p.dtype(0) != "float":
            continue
        dtype = _CAST_TO.get(c.value(1) or "")
        if dtype is not None and c.dtype(0) == "float":
            seen[dtype] = seen.get(dtype, 0) + 1
    return max(seen, key=lambda k: seen[k]) if seen else None


_MASKS = ("aten::masked_fill", "aten::masked_fill_", "aten::where", "aten::add", "aten::add_")
_SOFTMAX = ("aten::softmax", "aten::_softmax", "aten::safe_softmax", "aten::_safe_softmax")


def attention_pattern(calls: list[Call], scores: list[int]) -> dict[str, Any] | None:
    """How the model computed the attention whose softmax reads ``scores`` (its recorded
    shape), read from the calls its caller made just before that softmax: the element
    type of the scores ("bf16", "fp16" or "fp32"), and the mask applied to them, if any:
    its recorded shape, whether it is boolean (``masked_fill``, ``where``) or added, and
    whether it is causal (a square mask that the whole batch shares). None when no
    softmax of that shape was recorded."""
    for i, c in enumerate(calls):
        t = c.tensor(0) if c.name in _SOFTMAX and c.op else None
        if t is None or t[0] != scores:
            continue
        found: dict[str, Any] = {"dtype": REDUCED.get(c.dtype(0) or "", "fp32"),
                                 "mask": None, "boolean": False, "causal": False}
        parent, seen = c.parent, 0
        for j in range(i - 1, -1, -1):
            p = calls[j]
            if p.thread != c.thread or j == parent or seen >= 6:
                break
            if p.parent != parent or not p.op:
                continue
            seen += 1
            if p.name in ("aten::bmm", "aten::matmul", "aten::baddbmm"):
                break  # the scores' product: the pattern starts here
            if p.name not in _MASKS:
                continue
            k = 0 if p.name == "aten::where" else 1
            m = p.tensor(k)
            if m is None or len(m[0]) > len(scores) or any(
                    x not in (1, y) for x, y in zip(m[0][::-1], scores[::-1])):
                continue
            mask = list(m[0])
            found["mask"] = [1] * (len(scores) - len(mask)) + mask
            found["boolean"] = p.name != "aten::add" and p.name != "aten::add_"
            lead = found["mask"][:-2]
            found["causal"] = (found["boolean"] and all(x == 1 for x in lead)
                               and scores[-1] == scores[-2] and found["mask"][-2:] == scores[-2:])
            break
        return found
    return None


BACKWARD_NODE = "autograd::engine::evaluate_function: "


def backward_nodes(calls: list[Call], forward: list[int]) -> list[int]:
    """The backward nodes (autograd's ``evaluate_function`` ranges) of the ``forward``
    calls and of the operators directly inside them (``contiguous`` records its ``clone``'s
    number), matched by autograd's sequence number."""
    seqs = {calls[i].seq for i in forward if calls[i].seq is not None}
    inside = set(forward)
    seqs |= {c.seq for c in calls if c.parent in inside and c.seq is not None}
    return [j for j, c in enumerate(calls) if c.seq in seqs and c.name.startswith(BACKWARD_NODE)]
