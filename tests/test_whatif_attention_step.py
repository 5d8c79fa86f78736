"""The attention's what-if on the model itself (issue #27): where the model's own attention
can be switched to SDPA where it stands (a transformers model on its eager attention,
nn.MultiheadAttention asked for its weights), the whole step is timed with and without
the switch, in turn, and the advice names it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from reporter.collect import whatif as w
from reporter.collect.runner import _Stepper
from reporter.collect.target import Target

pytestmark = pytest.mark.slow


def _bert(attention: str = "eager", layers: int = 1) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32,
                                     num_hidden_layers=layers, num_attention_heads=2,
                                     intermediate_size=64, attn_implementation=attention)
    return transformers.BertModel(config).eval()


def test_a_transformers_model_on_eager_attention_is_switched_to_sdpa_and_back():
    model = _bert(layers=2)
    found = w.attention_switch(model)
    assert found is not None and found[0] == ["transformers"]
    names, fix = found
    ids = torch.randint(0, 100, (2, 16))
    counted = [0]
    with torch.no_grad():
        with w._sdpa_counted(counted):
            eager = model(ids).last_hidden_state
        assert counted == [0]
        with fix(), w._sdpa_counted(counted):
            assert model.config._attn_implementation == "sdpa"
            sdpa = model(ids).last_hidden_state
    assert counted == [2]  # one call a layer
    assert model.config._attn_implementation == "eager"
    assert torch.allclose(eager, sdpa, atol=1e-5)
    with pytest.raises(RuntimeError, match="the step broke"):  # put back all the same
        with fix():
            raise RuntimeError("the step broke")
    assert model.config._attn_implementation == "eager"


def test_a_model_with_nothing_to_switch_gives_no_switch():
    assert w.attention_switch(_bert("sdpa")) is None  # on SDPA already
    assert w.attention_switch(nn.Sequential(nn.Linear(4, 4))) is None


def test_multihead_attention_is_called_without_its_weights_and_put_back():
    """need_weights by keyword (its default) and by position; outside, the weights again.
    Not batch-first: its native fast path in inference calls no SDPA from Python."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2)
    x = torch.randn(5, 2, 16)
    names, fix = w.attention_switch(mha) or ([], None)
    assert names == ["need_weights"] and fix is not None
    counted = [0]
    with w._sdpa_counted(counted):
        out, weights = mha(x, x, x)
    assert counted == [0] and weights is not None
    with fix(), w._sdpa_counted(counted):
        by_default, none = mha(x, x, x)
        by_position, none_too = mha(x, x, x, None, True)
    assert counted == [2] and none is None and none_too is None
    assert torch.allclose(out, by_default, atol=1e-5)
    assert torch.allclose(out, by_position, atol=1e-5)
    assert "forward" not in mha.__dict__
    assert mha(x, x, x)[1] is not None


class _Attends(nn.Module):
    def __init__(self, weights: bool) -> None:
        super().__init__()
        self.weights = weights
        self.mha = nn.MultiheadAttention(16, 2)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=self.weights)[0]


def _stepper(model: nn.Module) -> _Stepper:
    target = Target(model=model, batches=[(torch.randn(8, 4, 16),)], batch_size=4,
                    modes=("inference",))
    return _Stepper(target, "inference", "cpu")


def test_the_step_is_timed_only_where_the_switch_adds_sdpa_calls():
    """A model that asks for the weights: its step is timed with and without the switch;
    one that already calls without them: the switch changes nothing, and the attention's
    recorded shapes stand in (None here)."""
    timed = w.attention_step("cpu", _stepper(_Attends(weights=True)))
    assert timed is not None
    assert timed["fix"] == "attention-sdpa" and timed["whole_step"]
    assert timed["switched"] == ["need_weights"] and timed["calls"] == 1
    assert timed["before_ms"] > 0 and timed["after_ms"] > 0
    assert w.attention_step("cpu", _stepper(_Attends(weights=False))) is None


class _BertThenAttends(nn.Module):
    """A transformers model on eager attention, and after it an nn.MultiheadAttention that
    is called without its weights already."""

    def __init__(self) -> None:
        super().__init__()
        self.bert = _bert()
        self.mha = nn.MultiheadAttention(32, 2)

    def forward(self, ids):
        x = self.bert(ids).last_hidden_state.transpose(0, 1)
        return self.mha(x, x, x, need_weights=False)[0]


def test_the_switch_names_only_what_it_changed():
    """Both can be switched (attention_switch lists both), but only the transformers model
    changed: the advice must not tell the user to pass need_weights=False, which the
    model passes already."""
    model = _BertThenAttends()
    assert (w.attention_switch(model) or ([],))[0] == ["transformers", "need_weights"]
    target = Target(model=model, batches=[(torch.randint(0, 100, (2, 16)),)], batch_size=2,
                    modes=("inference",))
    timed = w.attention_step("cpu", _Stepper(target, "inference", "cpu"))
    assert timed is not None and timed["switched"] == ["transformers"]
    assert timed["calls"] == 1  # BERT's one layer; the module called SDPA before too


class _UsesWeights(nn.Module):
    """A model that reads the attention weights it asks for: without them its step
    breaks."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2)

    def forward(self, x):
        out, weights = self.mha(x, x, x)
        return out + weights.mean()


def test_a_switch_that_breaks_the_step_leaves_the_recorded_chain_to_stand_in():
    """need_weights=False gives no weights to a model that reads them: the switch is not
    the model's fix, and the attention is left to its recorded shapes (None here), not
    failed; the module is put back."""
    model = _UsesWeights()
    assert w.attention_step("cpu", _stepper(model)) is None
    assert "forward" not in model.mha.__dict__
    model(torch.randn(8, 4, 16))  # as it was


@pytest.fixture(scope="module")
def eager_run(tmp_path_factory):
    """A small BERT on eager attention over 512 tokens, where its attention is 28-32% of
    the step (the 2-core machine, 2026-12-02), well over unfused-attention's 10% bar,
    profiled in inference by the runner. Over 256 tokens it was 11-17%: on a loaded CI
    machine it fell under the bar, and nothing fired (2026-11-30 and 2026-12-01)."""
    from reporter.collect.runner import RunOptions, profile_target

    def build(device="cpu", preset="default"):
        model = _bert(layers=1)
        ids = torch.randint(0, 100, (2, 512), generator=torch.Generator().manual_seed(0))
        return Target(model=model, batches=[(ids,)], batch_size=2, modes=("inference",),
                      forward=lambda m, batch: m(input_ids=batch[0]).last_hidden_state)
    for _ in range(3):  # a busy moment's timings are dropped (runner._whatif): again
        run = profile_target("bert-eager", build, RunOptions(
            device="cpu", windows=3, time_budget_s=0.3, warmup_steps=1),
            tmp_path_factory.mktemp("eager"))
        d = run.sections[0].whatif_disturbance
        if d is None or not d.disturbed:
            return run
    pytest.skip("the machine was busy while the what-ifs were timed, in three runs")


def test_the_runner_times_a_transformers_models_switch_and_the_advice_names_it(
        eager_run, tmp_path):
    """Live: the finding's saving is the step timed with the model switched to SDPA, and
    the advice says to switch it, in every language."""
    from reporter.analyze.analyzer import analyze_section
    from reporter.pipeline import report_view
    from reporter.render.report import render_markdown

    section = eager_run.sections[0]
    timed = section.whatif.get("unfused-attention")
    # what fired and what was tried, should it not have been timed (it failed once in CI,
    # 2026-11-30, with nothing timed, failed or noted, and passed before and after)
    fired = [(f.rule, f.evidence.share)
             for f in analyze_section(section, eager_run.target.get("batch_size")).findings]
    assert timed is not None, (section.whatif, section.whatif_note, section.whatif_failed,
                               fired)
    assert timed["fix"] == "attention-sdpa" and timed["switched"] == ["transformers"]
    assert timed["whole_step"] and len(timed["saved_share"]) == 2  # timed twice
    # the page faults each variant's timed steps took, kept through the store
    assert len(timed["faults"]) == 2 and all(x >= 0 for x in timed["faults"])
    from reporter.store import load, run_to_json

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.json").write_text(run_to_json(eager_run))
    assert load(folder).sections[0].whatif["unfused-attention"]["faults"] == timed["faults"]
    f = next(f for f in analyze_section(section, 2).findings if f.rule == "unfused-attention")
    assert f.evidence.sdpa_transformers and not f.evidence.sdpa_need_weights
    words = {"en": "this is a transformers model on its eager attention",
             "ru": "это модель transformers с eager-реализацией attention",
             "zh": "这是一个 transformers 模型，Attention 用的是 eager 实现"}
    for lang, text in words.items():
        said = render_markdown(report_view(eager_run, lang))
        assert text in said and 'set_attn_implementation("sdpa")' in said, lang
