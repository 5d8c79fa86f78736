"""reporter.pipeline from Python, without the command line: the functions each command
calls render, analyze and compare stored runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reporter import pipeline
from reporter.errors import BadInput

RUNS = Path(__file__).parent / "fixtures" / "runs"


@pytest.fixture
def runs(tmp_path):
    for name in ("cpu-transformer-bloat", "cpu-transformer-bloat-fixed"):
        shutil.copytree(RUNS / name, tmp_path / "runs" / name)
    return tmp_path / "runs"


def test_render_run_writes_each_format_and_tells_the_listener(runs):
    heard: list[Path] = []
    output = pipeline.Output("ru", ("md",), published=heard.append)
    paths = pipeline.render_run("cpu-transformer-bloat", runs, output)
    assert paths == heard == [runs / "cpu-transformer-bloat" / "report.ru.md"]
    assert "# Результаты профайлинга" in paths[0].read_text(encoding="utf-8")


def test_analyze_a_stored_run_as_json_and_as_a_report(runs, tmp_path):
    data = pipeline.analysis_json(str(runs / "cpu-transformer-bloat"), runs)
    assert [p["label"] for p in data["profiles"]]
    assert any(f["rule"] == "elementwise-blowup" for p in data["profiles"]
               for f in p["findings"])
    paths = pipeline.analyze(str(runs / "cpu-transformer-bloat"), runs, tmp_path,
                             pipeline.Output("zh"))
    assert paths == [runs / "cpu-transformer-bloat" / "report.zh.md"]


def test_compare_two_runs_into_a_new_folder(runs):
    comparison = pipeline.compare_inputs(["cpu-transformer-bloat",
                                          "cpu-transformer-bloat-fixed"], runs)
    first = pipeline.write_comparison(comparison, runs, None, pipeline.Output("en"))
    second = pipeline.write_comparison(comparison, runs, None, pipeline.Output("en"))
    assert first[0].name == second[0].name == "compare.en.md"
    assert first[0].parent != second[0].parent  # never one folder written twice


def test_bad_options_fail_before_any_work():
    with pytest.raises(BadInput, match="max-chars"):
        pipeline.Output.parse("en", "md", -1, False, print)
    with pytest.raises(BadInput, match="unknown format"):
        pipeline.Output.parse("en", "md,docx", 0, False, print)
    with pytest.raises(BadInput, match="unknown target"):
        pipeline.check_run_request(pipeline.RunRequest(("no-such-target",)))
    with pytest.raises(BadInput, match="time-budget"):
        pipeline.check_run_request(pipeline.RunRequest(("cnn",), time_budget_s=0))
    with pytest.raises(BadInput, match="two inputs"):
        pipeline.compare_inputs(["latest"], Path("."))


def test_report_stem_of_tables_and_traces():
    assert pipeline.report_stem(Path("x.txt")) == "x.report"
    assert pipeline.report_stem(Path("t.pt.trace.json.gz")) == "t.pt.trace.json.report"
    assert pipeline.report_stem(Path("t.json")) == "t.json.report"
