"""Findings that generalise (issue 66, item 5): two pieces of advice that were false.

1. A healthy CLIP got an element-wise blow-up alarm, with the ``q @ k.transpose`` advice,
   on quick_gelu's own multiplies (``x * torch.sigmoid(1.702 * x)``): a chain of one
   tensor, no pairwise product. With the shapes recorded, elementwise-blowup now fires
   only on the pairwise tensors they show, and counts only their time.
2. A model built of ``nn.TransformerEncoderLayer`` was told to use
   ``nn.TransformerEncoderLayer``. In inference torch runs the layer's fast path, whose
   attention on the CPU is bmm and softmax apart: the advice now says so, and what turning
   the fast path off would mean, and the step is timed that way.

Live tests (marked slow: they profile through the runner) run tiny models on the CPU
(tests/models/planted_h1.py), 1-11 s each on the 2-core development machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from reporter.analyze.analyzer import analyze, analyze_section
from reporter.collect import whatif as w
from reporter.collect.runner import RunOptions, _Stepper, profile_target
from reporter.collect.target import resolve
from reporter.model.profile import Op, Profile

PLANTED = Path(__file__).parent / "models" / "planted_h1.py"
BLOWUP, ATTENTION = "elementwise-blowup", "unfused-attention"


def _section(name: str, tmp_path: Path):
    """One section of a live CPU run of a planted model (one thread, short windows)."""
    spec, builder = resolve(f"{PLANTED}:{name}")
    run = profile_target(spec, builder, RunOptions(device="cpu", windows=3, time_budget_s=0.3,
                                                   warmup_steps=1, threads=1), tmp_path)
    return run.sections[0], run.target["batch_size"]


def _stepper(name: str, mode: str) -> _Stepper:
    spec, builder = resolve(f"{PLANTED}:{name}")
    return _Stepper(builder(device="cpu"), mode, "cpu")


# --- 1. elementwise-blowup: a pairwise product, not any element-wise time ----------------

@pytest.mark.slow
def test_clip_quick_gelu_is_no_blowup_at_any_share(tmp_path):
    """transformers' CLIPModel (small config, random weights, hidden_act quick_gelu) in
    training: its element-wise time (15-32% of the CPU time in three runs of 2026-12-04)
    is quick_gelu's multiplies of one tensor. Not a blow-up with the rule's threshold at
    zero: no recorded shape shows a pairwise tensor."""
    pytest.importorskip("transformers")
    section, batch = _section("clip_train", tmp_path)
    p = section.profile
    gelu = [o for o in p.ops_by_shape if o.name == "aten::mul" and o.input_shapes
            and o.input_shapes.endswith(", 512]]")]  # (B, T, intermediate) products
    assert gelu and sum(o.self_cpu_us for o in gelu) > 0  # the activation ran, and was timed
    rules = {f.rule for f in analyze(p, {BLOWUP: {"share": 0.0}})}
    assert BLOWUP not in rules
    assert BLOWUP not in {f.rule for f in analyze_section(section, batch).findings}


def _rows(*rows: tuple[str, str, float]) -> Profile:
    """A CPU profile from rows by shape: (operator, input shapes, self time in us)."""
    by_shape = [Op(n, calls=1, self_cpu_us=t, cpu_total_us=t, input_shapes=s)
                for n, s, t in rows]
    ops: dict[str, Op] = {}
    for o in by_shape:
        row = ops.setdefault(o.name, Op(o.name))
        row.calls += 1
        row.self_cpu_us += o.self_cpu_us
        row.cpu_total_us += o.cpu_total_us
    p = Profile(label="train", ops=list(ops.values()), ops_by_shape=by_shape)
    p.self_cpu_us = sum(o.self_cpu_us for o in by_shape)
    return p


GELU = [("aten::mul", "[[16, 65, 2048], []]", 150.0),  # 1.702 * x
        ("aten::mul", "[[16, 65, 2048], [16, 65, 2048]]", 250.0),  # x * sigmoid(...)
        ("aten::mm", "[[1040, 512], [512, 2048]]", 400.0)]


def test_an_activation_chain_never_qualifies_however_large_its_share():
    """quick_gelu's multiplies at 50% of the step: no finding at any threshold. Beside a
    pairwise product of (8, 64, 64, 32) from (8, 64, 1, 32) and (8, 1, 64, 32), only the
    product's time counts: at 5% no finding, though element-wise time is 55%; at 40%,
    the finding, whose share is still all of the element-wise time (as its words say)."""
    chain = _rows(*GELU)
    assert BLOWUP not in {f.rule for f in analyze(chain, {BLOWUP: {"share": 0.0}})}
    pairwise = ("aten::mul", "[[8, 64, 1, 32], [8, 1, 64, 32]]")
    small = _rows(*GELU, (*pairwise, 45.0))
    assert BLOWUP not in {f.rule for f in analyze(small)}
    large = _rows(*GELU, (*pairwise, 600.0))
    (f,) = [f for f in analyze(large) if f.rule == BLOWUP]
    assert f.evidence.pairwise_share == pytest.approx(600 / 1400)
    assert f.evidence.share == pytest.approx(1000 / 1400)


def test_a_repeat_that_materialises_a_broadcast_shows_the_pairwise_tensor():
    """(B, 1, T, D) repeated to (B, T, T, D) and multiplied: the copy shows the pairwise
    tensor, though the multiply's inputs are of one shape. A repeat of a tensor with no
    dimension of 1 (GQA's keys repeated along their heads) does not."""
    product = ("aten::mul", "[[4, 64, 64, 64], [4, 64, 64, 64]]", 600.0)
    repeat = ("aten::repeat", "[[4, 1, 64, 64], []]", 100.0)
    found = [f for f in analyze(_rows(product, repeat, ("aten::mm", "[[64, 64], [64, 64]]",
                                                        300.0))) if f.rule == BLOWUP]
    assert found and found[0].evidence.materialisers == ["aten::repeat"]
    heads = ("aten::repeat", "[[4, 16, 64, 64], []]", 100.0)
    assert BLOWUP not in {f.rule for f in analyze(
        _rows(product, heads, ("aten::mm", "[[64, 64], [64, 64]]", 300.0)))}


@pytest.mark.slow
def test_a_live_broadcast_pairwise_product_fires_and_its_activation_twin_does_not(tmp_path):
    """Live: token-pair scores by broadcasting, ``(h.unsqueeze(2) * h.unsqueeze(1)).sum(-1)``
    (no repeat), fire; the same model's quick_gelu MLP alone, at a zero threshold, does
    not."""
    section, batch = _section("pairwise_broadcast", tmp_path / "a")
    found = [f for f in analyze_section(section, batch).findings if f.rule == BLOWUP]
    assert found and found[0].evidence.pairwise_share > 0.3
    section, _ = _section("gelu_only", tmp_path / "b")
    assert BLOWUP not in {f.rule for f in analyze(section.profile, {BLOWUP: {"share": 0.0}})}


# --- 2. unfused-attention on a model that already uses the fused modules -----------------

def _advice(finding) -> dict[str, str]:
    from conftest import render_finding

    return {lang: render_finding(finding, lang) for lang in ("en", "ru", "zh")}


@pytest.mark.slow
def test_an_encoder_layer_in_inference_is_told_of_its_fast_path(tmp_path):
    """nn.TransformerEncoderLayer (batch first) in inference runs torch's fast path
    (aten::_transformer_encoder_layer_fwd), whose attention on the CPU is bmm and softmax
    apart: the finding stands, its advice names the fast path and the switch that leaves
    it, never the module the model already uses as the thing to use; what it is worth is
    not estimated from the profile (the rest of the layer is fused on the fast path)."""
    from reporter.analyze.savings import estimate

    section, batch = _section("encoder_inference", tmp_path)
    names = {o.name for o in section.profile.ops}
    assert "aten::_transformer_encoder_layer_fwd" in names
    (f,) = [f for f in analyze_section(section, batch).findings if f.rule == ATTENTION]
    assert f.evidence.fast_path and f.evidence.fast_path_encoder
    for lang, text in _advice(f).items():
        assert "set_fastpath_enabled(False)" in text and "_transformer_encoder_layer_fwd" in text
        assert "need_weights" not in text, lang  # the layer asks for no weights
        assert "use `nn.TransformerEncoderLayer`" not in text
    assert estimate(f, section.profile).saving_us is None


@pytest.mark.slow
def test_an_encoder_layer_in_training_calls_sdpa_and_gets_no_finding(tmp_path):
    """In training the layer calls scaled_dot_product_attention (need_weights=False): no
    unfused attention to report."""
    section, batch = _section("encoder_train", tmp_path)
    assert "aten::scaled_dot_product_attention" in {o.name for o in section.profile.ops}
    assert ATTENTION not in {f.rule for f in analyze_section(section, batch).findings}


@pytest.mark.slow
def test_multihead_attention_on_the_fast_path_is_told_of_need_weights_and_the_fast_path(
        tmp_path):
    """nn.MultiheadAttention called directly (need_weights left True) in inference: the
    fast path too, but the module's own call may ask for weights: the advice says both."""
    section, batch = _section("mha_weights_inference", tmp_path)
    (f,) = [f for f in analyze_section(section, batch).findings if f.rule == ATTENTION]
    assert f.evidence.fast_path and not f.evidence.fast_path_encoder
    text = _advice(f)["en"]
    assert "need_weights=False" in text and "set_fastpath_enabled(False)" in text


@pytest.mark.slow
@pytest.mark.parametrize("name, mode, switched", [
    ("encoder_inference", "inference", ["fastpath"]),
    ("mha_weights_inference", "inference", ["need_weights", "fastpath"]),
    ("mha_weights_train", "train", ["need_weights"]),
])
def test_the_attention_step_is_timed_off_the_fast_path_only_where_the_step_takes_it(
        name, mode, switched):
    """whatif.attention_step turns the fast path off (and its modules' weights) only where
    the step took it, and names what it changed; the fast path is on again after."""
    timed = w.attention_step("cpu", _stepper(name, mode))
    assert timed is not None and timed["switched"] == switched
    assert timed["calls"] >= 1 and timed["before_ms"] > 0 and timed["after_ms"] > 0
    assert torch.backends.mha.get_fastpath_enabled()


def test_the_advice_says_what_was_timed_off_the_fast_path():
    """The timed step's notes: the sentences say the saving was timed with the fast path
    off (and with need_weights=False where that changed too), in each language."""
    from reporter.analyze.rules.operators import _attention_timed
    from reporter.model.finding import Finding

    def finding(switched: list[str]) -> Finding:
        f = Finding(ATTENTION, "medium", {
            "basis": "cpu", "share": 0.4, "threshold": 0.1, "op": "aten::bmm",
            "op_share": 0.2, "op_time_us": 100.0, "calls": 8, "mem_per_call_b": 0,
            "softmax_calls": 4,
            "fast_path": True, "fast_path_encoder": switched == ["fastpath"]},
            ops=["aten::bmm"])
        _attention_timed(f, {"fix": "attention-sdpa", "switched": switched})
        return f
    encoder = _advice(finding(["fastpath"]))
    assert "timed on this model with the fast path off" in encoder["en"]
    assert "выключенным fast path" in encoder["ru"] and "关闭快速路径后实测" in encoder["zh"]
    both = _advice(finding(["need_weights", "fastpath"]))
    assert "need_weights=False` and torch's fast path off" in both["en"]
    assert all("set_fastpath_enabled(False)" in t for t in both.values())
