"""A figure that is not exactly zero or one never prints as if it were: a confidence
interval of ±0.02% is not "±0.0%", a step 3% over its speed of light is not "1.0x"
faster at best (issue 65: "±0.0%" on the H200 transformer, "1.0x" on T5)."""

from __future__ import annotations

import pytest

from reporter.render.fmt import Fmt


@pytest.mark.parametrize("lang,zero,small,whole", [
    ("en", "0.0%", "0.02%", "5.0%"), ("ru", "0,0\u00a0%", "0,02\u00a0%", "5,0\u00a0%"),
    ("zh", "0.0%", "0.02%", "5.0%")])
def test_a_small_share_keeps_the_decimals_that_show_it(lang, zero, small, whole):
    fmt = Fmt(lang)
    assert fmt.fine_pct(0.0) == zero
    assert fmt.fine_pct(0.00015) == small
    assert fmt.fine_pct(0.05) == whole == fmt.pct(0.05)
    assert fmt.fine_pct(0.000003) != zero


@pytest.mark.parametrize("ratio,shown", [(1.0, "1.0"), (1.034, "1.03"), (2.34, "2.3"),
                                         (1.004, "1.004"), (0.97, "0.97")])
def test_a_ratio_near_one_is_not_rounded_to_it(ratio, shown):
    assert Fmt("en").times(ratio) == shown
    assert Fmt("ru").times(ratio) == shown.replace(".", ",")


@pytest.mark.parametrize("lang,shown", [("en", "0.01%"), ("ru", "0,01\u00a0%"),
                                        ("zh", "0.01%")])
def test_a_tiny_mfu_is_not_printed_as_zero(lang, shown):
    """A launch-bound model does some FLOPs: its MFU is small, not 0.0% (the float64 MLP
    on the H200, 2026-12-04: 10.6 MFLOP a step in 2.30 ms of a 67 TFLOP/s peak)."""
    import dataclasses

    from conftest import FIXTURES

    from reporter import store
    from reporter.analyze import efficiency
    from reporter.render.report_view import _efficiency_view

    run = store.load(FIXTURES / "runs" / "cpu-transformer")
    e = efficiency.of_section(run.sections[0], run.target.get("batch_size"))
    assert isinstance(e, efficiency.Efficiency)
    tiny = dataclasses.replace(e, model_flops_per_step=10.6e6, flops_per_step=10.6e6,
                               step_us=2300.0, peak_flops=67e12)
    view = _efficiency_view(tiny, Fmt(lang))["efficiency"]
    assert view["mfu"] == view["hfu"] == shown


@pytest.mark.parametrize("lang,estimated,none", [
    ("en", "Its saving above is an estimate from the profile.",
     "Without that timing the report gives it no saving."),
    ("ru", "Экономия по этому замечанию выше — оценка по профилю.",
     "Без такого замера отчёт не оценивает выигрыш по этому замечанию."),
    ("zh", "上面对应的节省是根据分析数据估算的。", "没有这次实测，报告不给出该问题的节省估计。")])
def test_a_replacement_not_timed_says_whether_its_finding_kept_an_estimate(
        lang, estimated, none):
    """A finding priced from the profile keeps that estimate when its replacement could
    not be timed; one only a timing prices (fp64-compute) has none, and the report does
    not call "not quantifiable" an estimate (a float64 model whose float32 step raised,
    2026-12-04)."""
    from conftest import FIXTURES

    from reporter.pipeline import report_view
    from reporter.render.report import render_markdown
    from reporter.store import load

    from reporter.analyze.analyzer import analyze_run

    run = load(FIXTURES / "runs" / "cpu-transformer")
    section = run.sections[0]
    priced = next(f.rule for f, s in analyze_run(run)[0].main if s.saving_us is not None)
    section.whatif_failed = {priced: {"error": "RuntimeError: x"},
                             "fp64-compute": {"error": "RuntimeError: y"}}
    text = render_markdown(report_view(run, lang))
    assert text.count(estimated) == 1 and text.count(none) == 1
    assert text.index(estimated) < text.index(none)
