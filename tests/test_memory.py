"""Memory that belongs to its target: the memory profile's peak, by category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reporter.collect.memprof import MAX_POINTS, summarize
from reporter.model.run import MEMORY_CATEGORIES

COLUMNS = {0: "unknown", 1: "inputs", 2: "activations", 3: "parameters"}


def test_summarize_finds_the_peak_and_its_categories():
    times = [100, 200, 300, 400]
    sizes = [[0, 10, 0, 50], [0, 10, 30, 50], [5, 0, 80, 50], [0, 0, 0, 50]]
    tm = summarize(times, sizes, COLUMNS)
    assert tm.peak_b == 135
    assert tm.at_peak_b == {"unknown": 5, "activations": 80, "parameters": 50}
    assert tm.timeline_ms == [0.0, 0.1, 0.2, 0.3]
    assert tm.timeline_b["activations"] == [0, 30, 80, 0]
    assert "inputs" in tm.timeline_b and tm.timeline_b["inputs"] == [10, 10, 0, 0]


def test_summarize_keeps_the_peak_when_it_downsamples():
    n = 10_007
    times = list(range(n))
    sizes = [[0, 0, i % 97, 1000] for i in range(n)]
    sizes[5_003][2] = 10_000  # one narrow spike
    tm = summarize(times, sizes, COLUMNS)
    assert len(tm.timeline_ms) <= MAX_POINTS
    assert tm.peak_b == 11_000
    totals = [sum(v[i] for v in tm.timeline_b.values()) for i in range(len(tm.timeline_ms))]
    assert max(totals) == 11_000
    assert tm.timeline_ms == sorted(tm.timeline_ms)


def _run(name: str, scratch: Path):
    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve

    spec, builder = resolve(name)
    return profile_target(spec, builder, RunOptions(device="cpu", windows=3, time_budget_s=0.3,
                                                    warmup_steps=2), scratch)


@pytest.mark.slow
def test_a_targets_memory_does_not_depend_on_what_ran_before(tmp_path):
    """The fixed twin's tensor peak is the same alone and right after its larger baseline;
    the process's RSS is not (memory the allocator kept is reused)."""
    first = _run("transformer-bloat-fixed", tmp_path)
    larger = _run("transformer-bloat", tmp_path)
    after = _run("transformer-bloat-fixed", tmp_path)
    a, big, b = (r.sections[0].tensor_memory for r in (first, larger, after))
    assert a is not None and b is not None and big is not None, \
        [r.sections[0].tensor_memory_note for r in (first, larger, after)]
    assert big.peak_b > 2 * a.peak_b  # the baseline really is larger
    assert abs(b.peak_b - a.peak_b) <= 0.10 * a.peak_b, (a.peak_b, b.peak_b)
    # A training step holds parameters, gradients or optimizer state, and activations.
    assert {"parameters", "activations", "optimizer_state"} <= set(a.at_peak_b)
    assert set(a.at_peak_b) <= set(MEMORY_CATEGORIES)
    assert sum(a.at_peak_b.values()) == a.peak_b
    memory = after.sections[0].memory
    assert memory["host_held_b"] > 0
    assert memory["host_net_peak_b"] == max(0, memory["host_peak_b"] - memory["host_held_b"])


@pytest.mark.slow
@pytest.mark.parametrize("lang, words", [
    ("en", ("Peak of live tensors", "activations", "optimizer state")),
    ("ru", ("живых тензоров", "активации", "состояние оптимизатора")),
    ("zh", ("存活张量峰值", "激活值", "优化器状态")),
])
def test_the_report_shows_the_breakdown_and_its_chart(live_run, tmp_path, lang, words):
    from reporter.render.report import write_report
    from reporter.pipeline import report_view

    run = live_run("transformer-bloat-fixed")
    view = report_view(run, lang)
    path = write_report(view, tmp_path, "md")
    text = path.read_text()
    for w in words:
        assert w in text, w
    charts = sorted(p.name for p in tmp_path.glob("report-chart-memory-*.svg"))
    assert charts == [f"report-chart-memory-1-train.{lang}.svg"]
    assert f"]({charts[0]})" in text


def test_a_run_without_a_memory_profile_says_so(stored, tmp_path):
    """Runs stored before the memory profile render, and say why the breakdown is missing."""
    from reporter.render.report import write_report
    from reporter.pipeline import report_view
    from reporter.store import load

    _, folder = stored("cpu-transformer")
    data = json.loads((folder / "run.json").read_text())
    for s in data["run"]["sections"]:
        s.pop("tensor_memory", None)
        s.pop("tensor_memory_note", None)
    (folder / "run.json").write_text(json.dumps(data))
    text = write_report(report_view(load(folder), "en"), tmp_path, "md").read_text()
    assert "Tensor memory by category: not recorded" in text
