"""The near-roofline lever timed, not read off the peaks (issue #66, item 4): where the
step's matrix products run near their roofline and a dtype with a higher peak is the lever
left, the runner times the model's whole step under that dtype (``torch.autocast`` around
the forward and the loss, as a user applies it) against the step as it is; the report's
worth is that measurement, and where it was not faster, no precision advice. Untimed (a
stored run, an imported trace), the peaks' ratio is printed as an upper bound only."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import FIXTURES
from reporter.analyze.analyzer import analyze_section
from reporter.collect.runner import RunOptions, _Stepper, profile_target
from reporter.collect.target import Target, resolve
from reporter.collect.whatif import lever_step, lower_precision
from reporter.model.finding import NOT_FASTER, UP_TO_PEAKS
from reporter.pipeline import report_view
from reporter.render.report import render_markdown
from reporter.store import load

LANGS = ("en", "ru", "zh")


class _Seen(nn.Module):
    """Records the autocast state its forward ran under."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.seen: list[torch.dtype | None] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        on = torch.is_autocast_enabled("cpu")
        self.seen.append(torch.get_autocast_dtype("cpu") if on else None)
        return self.lin(x)


def _stepper(mode: str = "train") -> tuple[_Stepper, _Seen]:
    model = _Seen()
    target = Target(model=model, batches=[(torch.randn(4, 8),)], batch_size=4,
                    loss=lambda out, batch: out.float().pow(2).mean(),
                    optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                    modes=("train", "inference"))
    return _Stepper(target, mode, "cpu"), model


@pytest.mark.parametrize("mode", ["train", "inference"])
def test_lower_precision_runs_the_forward_under_autocast_and_puts_the_step_back(mode):
    step, model = _stepper(mode)
    step()
    with lower_precision(step, "bf16"):
        step()
    step()
    assert model.seen == [None, torch.bfloat16, None]
    with pytest.raises(RuntimeError, match="broke"):
        with lower_precision(step, "fp16"):
            step()
            raise RuntimeError("broke")
    step()
    assert model.seen[-2:] == [torch.float16, None]


def test_lower_precision_tf32_sets_the_matmul_precision_and_puts_it_back():
    step, _ = _stepper()
    before = torch.get_float32_matmul_precision()
    with lower_precision(step, "tf32"):
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == before


def _with_whatif(section, timed):
    return dataclasses.replace(section, whatif={"near-roofline": timed})


def _fixture_section():
    run = load(FIXTURES / "runs" / "cpu-transformer")
    return run, run.sections[0]


def _near(analysis):
    return next(((f, s) for f, s in analysis.main + analysis.minor
                 if f.rule == "near-roofline"), None)


def _report(run, lang):
    return render_markdown(report_view(run, lang))


def test_untimed_the_peaks_ratio_is_an_upper_bound_in_every_language():
    run, section = _fixture_section()
    assert not section.whatif or "near-roofline" not in section.whatif
    found = _near(analyze_section(section, run.target.get("batch_size")))
    assert found is not None
    f, s = found
    assert f.evidence.faster_dtype == "bf16"
    assert s.note == UP_TO_PEAKS and s.measured is None and s.saving_us is None
    assert s.high_us
    reports = {lang: _report(run, lang) for lang in LANGS}
    assert "up to **" in reports["en"] and "by the peaks' ratio: an upper bound, not timed here" \
        in reports["en"]
    assert "не больше **" in reports["ru"] and "верхняя оценка из отношения пиков" in reports["ru"]
    assert "最多可节省 **" in reports["zh"] and "按峰值之比得出的上限" in reports["zh"]
    # the lever's sentence says so too, never "about" for the peaks' ratio
    assert "the peaks' ratio, an upper bound" in reports["en"]


def _timed(before_ms: float, after_ms: float) -> dict:
    return {"before_ms": before_ms, "after_ms": after_ms,
            "saved_share": [1 - after_ms / before_ms], "whole_step": True,
            "fix": "autocast-bf16"}


def test_a_timed_lever_is_worth_what_was_measured_not_the_peaks_ratio():
    run, section = _fixture_section()
    step_us = section.throughput.step_us(run.target.get("batch_size"))
    timed = _timed(20.0, 15.0)  # 25% shorter
    section = _with_whatif(section, timed)
    run = dataclasses.replace(run, sections=[section, *run.sections[1:]])
    f, s = _near(analyze_section(section, run.target.get("batch_size")))
    assert s.note is None and s.measured is not None
    assert s.saving_us == pytest.approx(0.25 * step_us, rel=1e-6)
    assert f.evidence.lever_timed and f.evidence.lever_faster
    en = _report(run, "en")
    assert "timed here on the model's whole step" in en
    assert "25.0% shorter" in en
    for lang, words in (("ru", "замерен здесь на самой модели"),
                        ("zh", "已在本机对模型的整个单步实测")):
        assert words in _report(run, lang)


def test_a_lever_that_was_not_faster_gives_no_precision_advice():
    run, section = _fixture_section()
    section = _with_whatif(section, _timed(20.0, 31.0))  # bf16 slower, as BART on a CPU
    run = dataclasses.replace(run, sections=[section, *run.sections[1:]])
    f, s = _near(analyze_section(section, run.target.get("batch_size")))
    assert s.note == NOT_FASTER and not s.saving_us
    assert f.evidence.lever_timed and not f.evidence.lever_faster
    # a statement worth nothing is a minor line: measured, not faster
    en = _report(run, "en")
    assert "the replacement is not faster on this machine" in en
    # the other section (inference) keeps its untimed lever; this one gives none
    untimed = _report(load(FIXTURES / "runs" / "cpu-transformer"), "en")
    assert en.count("would save at most") == untimed.count("would save at most") - 1


@pytest.mark.slow  # profiles a target through the runner
def test_live_the_lever_is_timed_on_the_model_itself():
    """A step bound by fp32 products near their roofline, on this CPU (which has a bf16
    peak above its fp32 one, or no lever is offered and nothing is timed)."""
    spec, builder = resolve("tests/models/planted_lever.py:wide_mlp_train")
    with tempfile.TemporaryDirectory() as scratch:
        run = profile_target(spec, builder, RunOptions(device="cpu", windows=3), Path(scratch))
    section = run.sections[0]
    analysis = analyze_section(section, run.target.get("batch_size"))
    found = _near(analysis)
    if isinstance(analysis.efficiency, str):
        # the peaks were calibrated while other work ran: no efficiency, no statement
        # about a roofline, and so no lever to time
        assert found is None and "near-roofline" not in (section.whatif or {})
        return
    assert found is not None, [f.rule for f in analysis.findings]
    f, s = found
    if not f.evidence.faster_dtype:
        assert "near-roofline" not in (section.whatif or {})  # no lever: nothing timed
        return
    disturbed = section.whatif_disturbance is not None and section.whatif_disturbance.disturbed
    if disturbed:  # a busy machine: the estimate stays, an upper bound, and says so
        assert s.note == UP_TO_PEAKS and s.measured is None
        return
    timed = section.whatif["near-roofline"]
    assert timed["whole_step"] and timed["fix"] == f"autocast-{f.evidence.faster_dtype}"
    assert s.measured is not None and s.note in (None, NOT_FASTER)
    shares = timed["saved_share"]
    mean = sum(shares) / len(shares)
    if mean > 0:
        assert s.share(s.saving_us) == pytest.approx(mean, rel=0.02, abs=0.002)
    else:
        assert s.note == NOT_FASTER


def test_lever_step_times_nothing_without_a_lever_or_for_a_step_of_its_own():
    class NoAutocast:  # a target's own step function: no autocast of ours to set
        target = Target(model=nn.Linear(2, 2), batches=[(torch.randn(1, 2),)], batch_size=1,
                        modes=("inference",))
    assert lever_step(None, "cpu", NoAutocast()) is None
