"""Attention: the unfused attention chains timed against SDPA at the recorded shapes
(``attention``), and the model's own attention switched to SDPA for its step
(``attention_switch``, ``attention_step``)."""

from __future__ import annotations

import contextlib
import math
import sys
from functools import partial
from typing import Any, Callable, Iterator, Sequence

from ...analyze.shapes import BACKWARD_NODE, Call, attention_pattern
from ...analyze.shapes import dims as _dims
from ...analyze.shapes import shapes as _shapes
from ...model.profile import Profile
from .steps import _calls_with, _patchable, fixed_step
from .timing import Skipped, _DTYPES, _autocast, _cap, _generator, _medians_s


SOFTMAX = ("aten::_softmax", "aten::softmax")
PRODUCTS = ("aten::bmm", "aten::matmul")


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
    from ...analyze.timeline import shape_key

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

    from .. import device as devices

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
