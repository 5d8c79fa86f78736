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
