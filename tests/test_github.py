"""Reports for pull requests: under GitHub's comment limit, tables GitHub sees, the job summary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FIXTURES, cli
from markdown_it import MarkdownIt

from reporter.model.profile import Op, Profile
from reporter.model.run import Run, Section, Throughput
from reporter.render.report import GITHUB_COMMENT_LIMIT, RenderOptions, render_markdown
from reporter.render.view import LANGUAGES, Fmt
from reporter.pipeline import report_view
from reporter.store import load

GFM = MarkdownIt("commonmark").enable("table")


def _tables_seen(md: str) -> tuple[int, int]:
    """(pipe tables written, tables a GitHub-flavoured parser builds)."""
    written = len(re.findall(r"^\| ---", md, re.M))
    return written, GFM.render(md).count("<table>")


def _big_run() -> Run:
    """A run with 400 operators named like C++ templates and very long raw tables."""
    ops = []
    for i in range(400):
        name = (f"void at::native::(anonymous namespace)::kernel_{i}<float, "
                f"at::native::BinaryFunctor<float, float, float, at::native::MulFunctor<float> >, "
                f"at::detail::Array<char*, 3> >(int, at::native::Functor<float>) | <{i}> & more")
        ops.append(Op(name, calls=i + 1, self_cpu_us=1000.0 + i, cpu_total_us=2000.0 + i,
                      self_cpu_mem_b=1 << 20))
    ops.append(Op("aten::copy_", calls=5000, self_cpu_us=900_000, cpu_total_us=900_000))
    profile = Profile(label="train", self_cpu_us=sum(o.self_cpu_us for o in ops), steps=3,
                      ops=ops, ops_by_shape=ops[:200])
    for o in profile.ops_by_shape:
        o.input_shapes = str([[64, 128, 3, 3]] * 20)
    section = Section("train", Throughput([10.0, 11.0, 12.0], 4, 9.0), profile,
                      {"host_peak_b": 1 << 30})
    return Run("big", "2026-11-21T12:00:00+00:00", "cpu",
               {"name": "big", "preset": "default", "batch_size": 8}, {"torch": "2.x"}, [section])


def _part(md: str, start: str, end: str) -> str:
    return md.split(start, 1)[1].split(end, 1)[0]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_large_report_fits_a_comment_with_summary_and_findings_whole(lang):
    full_view = report_view(_big_run(), lang, log_rows=0)  # every row in the logs
    full = render_markdown(full_view)
    assert len(full) > GITHUB_COMMENT_LIMIT  # the test means something
    fitted_view = report_view(_big_run(), lang, log_rows=0)
    fitted = render_markdown(fitted_view, RenderOptions(max_chars=GITHUB_COMMENT_LIMIT))
    assert len(fitted) <= GITHUB_COMMENT_LIMIT
    # Everything before the logs is the same, word for word.
    assert fitted.split("<details>")[0] == full.split("<details>")[0]
    limit = Fmt(lang).int(GITHUB_COMMENT_LIMIT)  # as the language writes it
    assert limit in _part(fitted, "<details>", "</details>")  # it says the logs were cut
    written, seen = _tables_seen(fitted)
    assert written >= 2 and seen == written


def test_every_golden_report_is_read_as_github_markdown():
    for gold in sorted((Path(__file__).parent / "gold").glob("*.md")):
        if gold.name == "README.md":
            continue
        md = gold.read_text(encoding="utf-8")
        written, seen = _tables_seen(md)
        assert seen == written, gold.name
        assert "<script" not in GFM.render(md)
        assert md.startswith("<!-- reporter:"), gold.name


def test_github_mode_writes_mermaid_and_the_job_summary(tmp_path, stored, monkeypatch):
    root, folder = stored("cpu-transformer-bloat")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    res = cli("render", folder, "--lang", "en", "--github")
    assert res.code == 0, res.err
    md = Path(res.out.strip()).read_text()
    assert "```mermaid\npie showData" in md and "![" not in md
    text = summary.read_text()
    assert text.startswith("earlier step\n")
    assert "<!-- reporter:report:transformer-bloat -->" in text
    res = cli("compare", FIXTURES / "runs" / "cpu-transformer-bloat",
              FIXTURES / "runs" / "cpu-transformer-bloat-fixed", "--github", "--lang", "zh",
              "--out", tmp_path / "cmp")
    assert res.code == 0, res.err
    md = (tmp_path / "cmp" / "compare.zh.md").read_text()
    assert "```mermaid\nxychart-beta" in md and "bar [" in md
    assert summary.read_text().count("<!-- reporter:") == 2


def test_a_limit_that_cannot_be_met_is_one_line(stored):
    root, folder = stored("cpu-tensor-ops")
    res = cli("render", folder, "--lang", "en", "--max-chars", "500")
    assert res.code == 1
    assert len(res.err.strip().splitlines()) == 1 and "--max-chars" in res.err
    assert not (folder / "report.en.md").exists()


def test_the_pdf_keeps_whole_logs_and_its_own_charts(tmp_path):
    import shutil
    if shutil.which("pdftotext") is None:
        pytest.skip("poppler-utils is not installed")
    from reporter.render.report import RenderOptions, write_report
    view = report_view(load(FIXTURES / "runs" / "cpu-transformer-bloat"), "en")
    pdf = write_report(view, tmp_path, "pdf", RenderOptions(max_chars=3000, github=True))
    import subprocess
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
    assert "more rows" not in text and "pie showData" not in text
