"""Rules about operators that hold the time: element-wise blow-ups, one dominant operator,
unfused attention, dropout."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...model import vendors
from ...model.choice import OVER_STEPS, Values, always, either, first, of, on_gpu, steps, when
from ...model.finding import Evidence, Finding, Saving, opt
from ...model.profile import Op, Profile
from .. import savings
from ..compiled import wraps_a_graph
from ..findings import MATMUL_OPS, WhatIf, Worth, basis, op_evidence, operators, rule, share
from ..shapes import (MATRIX_CALLS, blowup_shapes, copies_of, dense_copies, on_shapes,
                      pairwise_shapes)
from ._common import ranked, severity

# Element-wise and reduction operators that make a new tensor. In-place updates (mul_,
# add_, addcdiv_, ...) are left out: they materialise nothing, and most of them are an
# optimizer's per-parameter step, which single-tensor-optimizer reports (counting them
# here made a healthy twin's AdamW read as a blow-up on a loaded machine).
ELEMENTWISE = {
    "aten::mul", "aten::add", "aten::sub", "aten::div", "aten::sum", "aten::mean",
    "aten::pow", "aten::exp", "aten::neg", "aten::sqrt", "aten::rsqrt", "aten::where",
    "aten::maximum", "aten::minimum", "aten::prod", "aten::mul_out",
}


# Operators that materialise a larger tensor than their input (blow-up).
BLOWUP = ("aten::repeat", "aten::repeat_interleave", "aten::tile", "aten::expand_copy")


def _fused_attention_saving(w: Worth) -> Saving:
    """The softmax, masks and copies go away; the products stay, at their roofline, in
    the fused kernel. Not on torch's fast path of the modules: off it, the attention is
    fused and the rest of the layer no longer is, which the profile cannot weigh (the
    step timed with the fast path off, whatif.attention_step, can)."""
    ev = w.finding.evidence
    if not isinstance(ev, UnfusedAttention) or ev.fast_path:
        return w.unquantified()
    return savings.work_removed(w, keep_us=savings.matrix_roof(w.finding.ops, w.eff))


@dataclass(kw_only=True)
class ElementwiseBlowup(Evidence):
    basis: str
    share: float  # the element-wise operators' and their copies' share of the basis
    threshold: float
    op: str  # the largest element-wise operator (op_evidence)
    op_share: float
    op_time_us: float
    calls: int
    mem_per_call_b: int
    materialisers: list[str]  # the operators that made the blown-up tensors
    materialised_share: float  # their copies' share of the basis
    others: list[str]  # the next element-wise operators
    # with recorded shapes: the share on the pairwise tensors they show
    pairwise_share: float | None = opt()

    def fresh_ops(self) -> list[str]:
        return [str(m) for m in self.materialisers]

    def copies_share(self) -> float:
        return float(self.materialised_share or 0.0)


_SAYS_ELEMENTWISE_BLOWUP = {
    # memory a call of 1 KiB or more (less is not said: report_view)
    "memory": when("memory_per_call", lambda v: of(ElementwiseBlowup)(v).mem_per_call_b >= 1024),
    "materialisers_verb": either(
        "several_make", "one_makes", lambda v: len(of(ElementwiseBlowup)(v).materialisers) > 1
    ),
    "together": either("with_the_copies", "without_copies",
                       lambda v: of(ElementwiseBlowup)(v).materialisers),
    "why": either("tensors_blown_up", "memory_bound",
                  lambda v: of(ElementwiseBlowup)(v).materialisers),
    # the advice by what was there: a repeat or a dense expand to undo; else a pairwise
    # product the recorded shapes show (broadcast, no copy); else element-wise work alone
    # (a lone aten::pow got the repeat and einsum advice)
    "advice": first(("broadcast_not_repeat", lambda v: of(ElementwiseBlowup)(v).materialisers),
                    ("products_as_matmul",
                     lambda v: of(ElementwiseBlowup)(v).pairwise_share is not None),
                    ("fewer_intermediates", always)),
    "compile": when("fuse_with_compile", lambda v: not of(ElementwiseBlowup)(v).compiled),
}


@rule("elementwise-blowup", says=_SAYS_ELEMENTWISE_BLOWUP, evidence=ElementwiseBlowup,
      saving=savings.removed, frees=True,
      whatif=WhatIf("blowup-matmul", replaces_all=True, of_recorded=True), share=0.30,
      high=0.50)
def elementwise_blowup(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Element-wise and reduction operators hold a large share of the time."""
    b, ops, total = ranked(profile, ELEMENTWISE)
    present = [name for name in BLOWUP if any(o.name == name and o.calls for o in profile.ops)]
    # The blow-up's own copies: the inclusive time of the operators that materialise it,
    # and of the copies that make its expanded operands dense (expand(...).contiguous(),
    # where the recorded shapes show the pairwise product they feed).
    inclusive = "device_total_us" if b.name == "device" else "cpu_total_us"
    made_us = sum(getattr(o, inclusive) for o in profile.ops if o.name in present)
    blown = blowup_shapes(profile) if ops else []
    dense_us, dense = (dense_copies(profile, blown, inclusive) if ops else (0.0, []))
    made = (made_us + dense_us) / b.total_us if b.total_us > 0 else 0.0
    qualifying, pairwise = total + made, None
    # a table of shapes that leaves a materialiser out (the seed's, its top 40 rows) cannot
    # show what it made: its presence stands, as without shapes
    unseen = [n for n in present if not any(o.name == n for o in profile.ops_by_shape)]
    if ops and profile.ops_by_shape and not unseen:
        # With the shapes recorded, element-wise time is a blow-up only on the pairwise
        # tensors they show (shapes.pairwise_shapes: a broadcast that grew a tensor, a
        # repeat or expand().contiguous() that materialised one), and only that time,
        # with the copies that made them, counts against the threshold: an activation
        # of one tensor never does, however large its share (CLIP's quick_gelu read 29%
        # in one run of three, and got the q @ k.transpose advice)
        shown = pairwise_shapes(profile, ELEMENTWISE)
        own, every = on_shapes(profile, ELEMENTWISE, shown, b.attr)
        copied = min(made_us, copies_of(profile, shown, inclusive)) + dense_copies(
            profile, [list(s) for s in shown], inclusive)[0]
        # (rows by shape without their own times cannot apportion it: all of it)
        pairwise = (total * own / every if every > 0 else total) + \
            (copied / b.total_us if b.total_us > 0 else 0.0)
        qualifying = pairwise if shown else 0.0
    if not ops or qualifying <= limits["share"]:
        return None
    present += dense
    return Finding("elementwise-blowup", severity(total + made, limits["high"]),
                   ElementwiseBlowup(basis=b.name, share=total + made,
                                     threshold=limits["share"], **op_evidence(ops[0], b),
                                     materialisers=present, materialised_share=made,
                                     others=[o.name for o in ops[1:4]],
                                     pairwise_share=pairwise),
                   ops=[o.name for o in ops[:3]])


def _dominant_saving(w: Worth) -> Saving:
    """The time beyond its roofline, where the roofline prices the operator and its calls
    did not grow within the step. Otherwise an upper bound (``savings.upper_bound``): the
    time it takes, which no fix of it can beat, is what it is worth at most; a loop whose
    calls grow (``growing``: a quadratic pattern) is fixed by taking its work away, which
    the roofline does not price (a growing torch.cat, 87% of the CPU time, ranked below a
    5-8% page-fault finding, issue 66)."""
    e = w.finding.evidence
    growing = isinstance(e, DominantOperator) and bool(e.growing)
    if not growing:
        s = savings.beyond_roofline(w)
        if s.saving_us is not None:
            return s
    if isinstance(e, DominantOperator) and e.loop_us and w.accounts_us is not None:
        # the fix rewrites the loop: it takes away more than the operator's own time
        # (the growing copies' memory traffic slows the code around them: growing_cat's
        # fix saved 84% of a step whose torch.cat took 78%, 2026-12-05), and no more than
        # the loop's module's own code (the words say which bound: f.loop)
        loop_us = float(e.loop_us) / max(w.steps, 1)
        return savings.upper_bound(dataclasses.replace(w, accounts_us=loop_us))
    return savings.upper_bound(w)


def _loop_us(profile: Profile, module: str) -> float | None:
    """The time per step of a module's own code (its forward, less its child modules'),
    from the runner's module marks; None without them. Where an operator's growing calls
    run in a module's forward, that loop is the module's own code, and a fix that joins
    the pieces once can save no more than it."""
    b = profile.breakdown
    fwd = b.module_forward_us if b is not None else {}
    if module not in fwd:
        return None
    assert b is not None
    depth = b.module_depth.get(module)

    def child(name: str) -> bool:
        if depth == 0:  # the model itself (named by its class): its children, depth 1
            return b.module_depth.get(name) == 1
        return (name.startswith(module + ".")
                and name.count(".") == module.count(".") + 1)
    return max(0.0, fwd[module] - sum(us for name, us in fwd.items() if child(name)))


@dataclass(kw_only=True)
class DominantOperator(Evidence):
    basis: str
    share: float  # the operator's share of the basis
    threshold: float
    op: str  # op_evidence
    op_share: float
    op_time_us: float
    calls: int
    mem_per_call_b: int
    matrix_op: bool  # a matrix product or a convolution
    most: bool  # over DOMINANT_MOST of the basis
    # read call by call from a trace (Profile.op_calls), where it has the calls; then all
    # six are in the JSON, null or not
    calls_per_step: float | None = opt()
    step_calls: int | None = opt()
    growing: bool | None = opt()  # its inputs grow within a step
    module: str | None = opt()
    forward_at: str | None = opt()
    source: str | None = opt()
    # where they grow: the elements of the first and the last call's input
    first_elements: int | None = opt()
    last_elements: int | None = opt()
    loop_us: float | None = opt()  # its module's own code, over the steps (CPU only)


_READ = ("calls_per_step", "step_calls", "growing", "module", "forward_at", "source")


def _dominant(v: Values) -> DominantOperator:
    return of(DominantOperator)(v)


_SAYS_DOMINANT_OPERATOR = {
    "per_step": when("calls_per_step", lambda v: _dominant(v).calls_per_step is not None
                     and steps(v) > 1),
    # memory a call of 1 KiB or more (less is not said: report_view)
    "memory": when("memory_per_call", lambda v: _dominant(v).mem_per_call_b >= 1024),
    # over half the time: any speed-up is its; from 30%, the largest cost no other
    # finding explains
    "lead": either("speedup_from_it", "largest_unexplained", lambda v: _dominant(v).most),
    "growth": when("inputs_grow", lambda v: _dominant(v).growing),
    "module": when("called_in_module", lambda v: _dominant(v).module),
    "forward_at": when("module_forward_at", lambda v: _dominant(v).forward_at),
    "source": when("source_line", lambda v: _dominant(v).source),
    "advice": either("join_once", "look_at_call_site", lambda v: _dominant(v).growing),
    # bf16 products on a CPU without bf16 matrix units: BART's
    # training step took 15 times as long under bf16 autocast
    "precision": either(
        "lower_precision_timed_first",
        "lower_precision",
        lambda v: not on_gpu(v) and _dominant(v).matrix_op,
    ),
    "fuse": when("fuse_with_compile", lambda v: not _dominant(v).compiled),
    # the same caveat, said after the question where a language words it apart (ru)
    "precision_caveat": when("time_bf16_first",
                             lambda v: not on_gpu(v) and _dominant(v).matrix_op),
    "compiled": when("compiled_already", lambda v: _dominant(v).compiled),
}

# From this share of the basis time an operator is "the" cost: any speed-up is its.
DOMINANT_MOST = 0.50


@rule("dominant-operator", says=_SAYS_DOMINANT_OPERATOR, evidence=DominantOperator,
      about_products=True,
      saving=_dominant_saving, catch_all=True, share=0.30)
def dominant_operator(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """One operator holds a large share of the self time (30% or more) and no other
    finding explains it (a catch-all). Its calls, read call by call from a trace
    (Profile.op_calls), say how many there are per step, whether their inputs grow within
    a step, and the module they run in."""
    b = basis(profile)
    # a compiled graph's call holds its kernels: the compiled section says what they are,
    # and "look at its input shapes" is no advice for a graph
    ops = [o for o in operators(profile) if not wraps_a_graph(o.name)]
    if not ops or b.total_us <= 0:
        return None
    top = max(ops, key=lambda o: getattr(o, b.attr))
    s = share([top], b)
    if s <= limits["share"]:
        return None
    # a matrix product or a convolution (mkldnn's and cudnn's included): on a CPU, lower
    # precision is advice to time both ways (BART's step took 15 times as long in bf16)
    matrix = top.name in MATMUL_OPS or top.name in MATRIX_CALLS or "convolution" in top.name
    calls = profile.op_calls.get(top.name)
    ev = DominantOperator(basis=b.name, share=s, threshold=limits["share"],
                          **op_evidence(top, b), matrix_op=matrix, most=s > DOMINANT_MOST)
    if calls is not None and calls.step_calls > 0:
        ev.calls_per_step, ev.step_calls = calls.calls_per_step, calls.step_calls
        ev.growing, ev.module = calls.growing, calls.module
        ev.forward_at, ev.source = calls.forward_at, calls.source
        ev.keep(*_READ)
        if calls.growing:
            ev.first_elements = calls.first_elements
            ev.last_elements = calls.last_elements
            loop = _loop_us(profile, calls.module) if calls.module else None
            steps = max(profile.steps, 1)
            # over the steps, as evidence times are; only where the loop holds more than
            # the operator's own time (the operator's calls all inside it), and on the
            # CPU: the module marks time the host, not the device's kernels
            if b.name == "cpu" and loop is not None and loop * steps > top.self_cpu_us:
                ev.loop_us = loop * steps
    return Finding("dominant-operator", "medium", ev, ops=[top.name])


_ATTENTION_PARTS = ("aten::bmm", "aten::baddbmm", "aten::_softmax", "aten::softmax",
                    "aten::_softmax_backward_data", "aten::masked_fill", "aten::masked_fill_")


_SOFTMAX_OPS = ("aten::_softmax", "aten::softmax")


_FUSED_ATTENTION = ("scaled_dot_product", "flash_attention", "efficient_attention",
                    *vendors.names("fused_attention"))


def _attention_timed(f: Finding, timed: dict[str, Any]) -> None:
    """What the saving was timed with where the model's own attention was switched to
    SDPA (whatif.attention_step): a transformers model's attn_implementation, an
    nn.MultiheadAttention's need_weights. The advice names the switch."""
    switched = (timed.get("switched") or []) if timed.get("fix") == "attention-sdpa" else []
    if isinstance(f.evidence, UnfusedAttention):
        f.evidence.sdpa_transformers = "transformers" in switched
        f.evidence.sdpa_need_weights = "need_weights" in switched
        f.evidence.sdpa_fastpath_off = "fastpath" in switched


@dataclass(kw_only=True)
class UnfusedAttention(Evidence):
    basis: str
    share: float  # the attention's parts' share of the basis
    threshold: float
    op: str  # its largest part (op_evidence)
    op_share: float
    op_time_us: float
    calls: int
    mem_per_call_b: int
    softmax_calls: int
    fast_path: bool  # every attention ran in torch's fast path of the modules
    fast_path_encoder: bool  # each inside an nn.TransformerEncoderLayer's
    scale_b: float | None = opt()  # what scaling the scores allocates (_scale_bytes)
    # what the model's own attention was switched to SDPA with (whatif: _attention_timed)
    sdpa_transformers: bool | None = opt()
    sdpa_need_weights: bool | None = opt()
    sdpa_fastpath_off: bool | None = opt()

    def freed_b(self) -> float:
        return float(self.scale_b or 0.0)


# the model's own attention switched to SDPA for the timing (whatif.attention_step); a
# model that already uses nn.TransformerEncoderLayer or nn.MultiheadAttention, on torch's
# fast path, is told so, not told to use them
_SAYS_UNFUSED_ATTENTION = {
    "advice": first(
        ("sdpa_in_transformers", lambda v: of(UnfusedAttention)(v).sdpa_transformers),
        ("mha_without_weights", lambda v: of(UnfusedAttention)(v).sdpa_need_weights),
        ("encoder_fast_path", lambda v: of(UnfusedAttention)(v).fast_path_encoder),
        ("mha_fast_path", lambda v: of(UnfusedAttention)(v).fast_path
         or of(UnfusedAttention)(v).sdpa_fastpath_off),
        ("call_sdpa", always),
    ),
    "mha_too": when(
        "and_mha_without_weights",
        lambda v: of(UnfusedAttention)(v).sdpa_transformers
        and of(UnfusedAttention)(v).sdpa_need_weights,
    ),
    "fast_path_timed": either(
        "timed_without_fast_path", "time_both_ways",
        lambda v: of(UnfusedAttention)(v).sdpa_fastpath_off),
    "fast_path_too": when(
        "and_fast_path_off",
        lambda v: of(UnfusedAttention)(v).sdpa_need_weights
        and of(UnfusedAttention)(v).sdpa_fastpath_off,
    ),
}


# torch's fast path of nn.TransformerEncoderLayer and nn.MultiheadAttention (inference,
# batch first; torch/nn/modules/transformer.py, activation.py): its attention runs inside
# aten::_native_multi_head_attention, which on the CPU calls bmm and softmax apart
_FAST_PATH_OPS = ("aten::_native_multi_head_attention", "aten::_transformer_encoder_layer_fwd")


def _fast_path(profile: Profile, softmax_calls: int) -> tuple[bool, bool]:
    """Whether every attention the profile shows ran in torch's fast path of the modules
    ("fast_path": a call of aten::_native_multi_head_attention for each softmax call), and
    each of those inside an nn.TransformerEncoderLayer's ("fast_path_encoder": one
    aten::_transformer_encoder_layer_fwd a call; the layer asks for no weights), not an
    nn.MultiheadAttention's called directly, which may ask for them."""
    native, layer = (sum(o.calls for o in profile.ops if o.name == n) for n in _FAST_PATH_OPS)
    fast = native > 0 and native >= softmax_calls
    return fast, fast and layer >= native


@rule("unfused-attention", says=_SAYS_UNFUSED_ATTENTION, evidence=UnfusedAttention,
      saving=_fused_attention_saving,
      whatif=WhatIf("attention", notes=_attention_timed), frees=True, share=0.10)
def unfused_attention(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Attention as separate bmm/matmul and softmax kernels instead of one fused kernel."""
    names = {o.name for o in profile.ops}
    if any(f in n for n in names for f in _FUSED_ATTENTION):
        return None
    has_softmax = any(n in names for n in ("aten::_softmax", "aten::softmax"))
    has_bmm = any(n in names for n in ("aten::bmm", "aten::baddbmm"))
    if not (has_softmax and has_bmm):
        return None
    b = basis(profile)
    parts = sorted((o for o in operators(profile) if o.name in _ATTENTION_PARTS),
                   key=lambda o: getattr(o, b.attr), reverse=True)
    s = share(parts, b)
    if s <= limits["share"]:
        return None
    softmax_calls = sum(o.calls for o in parts if "softmax" in o.name
                        and "backward" not in o.name)
    scale_b = _scale_bytes(profile)
    fast, encoder = _fast_path(profile, softmax_calls)
    return Finding("unfused-attention", "medium",
                   UnfusedAttention(basis=b.name, share=s, threshold=limits["share"],
                                    **op_evidence(parts[0], b), softmax_calls=softmax_calls,
                                    fast_path=fast, fast_path_encoder=encoder,
                                    scale_b=scale_b if scale_b > 0 else None),
                   ops=[o.name for o in parts])


def _scale_bytes(profile: Profile) -> float:
    """The bytes the scaling of an attention's scores allocates (a division or a
    multiplication of a tensor of a softmax's input shape by a scalar, and its backward,
    by the recorded shapes and memory): a fused kernel does away with those tensors and
    the page faults they take (savings.fault_share)."""
    from ..shapes import dims

    scores = {tuple(d[0]) for o in profile.ops_by_shape if o.name in _SOFTMAX_OPS
              for d in [dims(o)] if d and len(d[0]) >= 3}
    return float(sum(max(0, o.self_cpu_mem_b) for o in profile.ops_by_shape
                     if o.name in ("aten::div", "aten::mul")
                     for d in [dims(o)] if d and tuple(d[0]) in scores and not any(d[1:])))


# Dropout's operators: the top-level calls (their inclusive time holds the mask's
# bernoulli_, its scaling and the multiply) and the fused kernel's backward.
_DROPOUT = ("aten::dropout", "aten::feature_dropout", "aten::alpha_dropout",
            "aten::feature_alpha_dropout", "aten::native_dropout",
            "aten::native_dropout_backward")


_DROPOUT_PARTS = ("aten::bernoulli_", "aten::bernoulli", "aten::native_dropout",
                  "aten::native_dropout_backward")


def _dropout_rows(profile: Profile) -> tuple[dict[str, Op], list[Op]]:
    """Dropout's operator rows by name, and those of its top-level calls (aten::native_dropout
    runs inside aten::dropout when both are recorded)."""
    rows = {o.name: o for o in operators(profile) if o.name in _DROPOUT}
    top = [o for n, o in rows.items() if n != "aten::native_dropout" or
           "aten::dropout" not in rows]
    return rows, top


def dropout_calls(profile: Profile) -> int:
    """The dropout calls the profile recorded, over its steps (the top-level ones; their
    backward left out)."""
    return sum(o.calls for o in _dropout_rows(profile)[1] if not o.name.endswith("_backward"))


def _dropout_timed(f: Finding, timed: dict[str, Any]) -> None:
    """Whether the saving was timed with dropout off altogether (whatif.dropout_step): the
    report says so beside the advice's gentler options."""
    if isinstance(f.evidence, DropoutCost):
        f.evidence.timed_off = timed.get("fix") == "dropout-off"


@dataclass(kw_only=True)
class DropoutCost(Evidence):
    basis: str
    share: float  # dropout's share of the basis, its masks' backward included
    threshold: float
    op: str  # the largest top-level dropout call
    op_time_us: float
    calls: int
    backward_us: float  # an unfused dropout's mask multiplied in the backward
    mask_backward: bool
    fused: bool  # aten::native_dropout
    inference: bool  # found in an inference step
    timed_off: bool | None = opt()  # timed with dropout off (whatif: _dropout_timed)


_SAYS_DROPOUT_COST = {
    "steps": OVER_STEPS,
    "mask_backward": when("mask_multiplied_backward",
                          lambda v: of(DropoutCost)(v).mask_backward),
    "unfused": when("mask_scaled_and_multiplied", lambda v: not of(DropoutCost)(v).fused),
    "compile": when("compile_fuses_the_mask", lambda v: not of(DropoutCost)(v).compiled),
    "advice": either("call_eval", "weigh_the_rate", lambda v: of(DropoutCost)(v).inference),
    "timed_off": when("timed_with_dropout_off", lambda v: of(DropoutCost)(v).timed_off),
}


@rule("dropout-cost", says=_SAYS_DROPOUT_COST, evidence=DropoutCost,
      saving=savings.removed, frees=True,
      whatif=WhatIf("dropout-off", notes=_dropout_timed),
      share=0.05, high=0.25)
def dropout_cost(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Dropout's random masks take a share of the time (a bernoulli_ per element on the
    CPU; a fused kernel on a GPU, still a random number per element)."""
    b = basis(profile)
    inclusive = "device_total_us" if b.name == "device" else "cpu_total_us"
    rows, top = _dropout_rows(profile)
    if not rows or b.total_us <= 0:
        return None
    calls = dropout_calls(profile)
    backward_us = 0.0 if "aten::native_dropout_backward" in rows else \
        _mask_backward_us(profile, calls, b.attr)
    time_us = sum(getattr(o, inclusive) for o in top) + backward_us
    s = time_us / b.total_us
    if s <= limits["share"]:
        return None
    first = max(top, key=lambda o: getattr(o, inclusive))
    return Finding("dropout-cost", severity(s, limits["high"]),
                   DropoutCost(basis=b.name, share=s, threshold=limits["share"],
                               op=first.name, op_time_us=time_us, calls=calls,
                               backward_us=backward_us, mask_backward=backward_us > 0,
                               fused="aten::native_dropout" in rows,
                               inference=profile.label == "inference"),
                   ops=sorted({*rows, *(o.name for o in operators(profile)
                                        if o.name in _DROPOUT_PARTS)}))


def _mask_backward_us(profile: Profile, calls: int, attr: str) -> float:
    """The backward of an unfused dropout (``aten::dropout``: a mask, then a multiply,
    whose backward is one more multiply by the mask, an anonymous ``MulBackward0``): the
    multiplies of two tensors of a dropout's input shape beyond the forward's own (one
    per dropout call), at most one per dropout call, at the mean time of such a multiply
    (from the recorded shapes; 0 without them, or in inference)."""
    from ..shapes import dims

    inputs = {tuple(d[0]) for o in profile.ops_by_shape if o.name == "aten::dropout"
              for d in [dims(o)] if d}
    muls = [o for o in profile.ops_by_shape if o.name == "aten::mul" and o.calls
            for d in [dims(o)] if len(d) == 2 and tuple(d[0]) == tuple(d[1]) and
            tuple(d[0]) in inputs]
    n = sum(o.calls for o in muls)
    extra = min(max(0, n - calls), calls)
    return extra * sum(getattr(o, attr) for o in muls) / n if n else 0.0
