"""A fourth language is a folder, not a code change: copied from en with its words marked,
found through $REPORTER_TEMPLATES, it renders every kind of report (a run, profiles read
from a trace, a comparison) in Markdown and PDF, with Babel formatting for its locale."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from pypdf import PdfReader

from conftest import cli
from reporter.render.keytable import format_table
from reporter.render.languages import language
from reporter.store import load

FIXTURES = Path(__file__).parent / "fixtures" / "runs"
MARK = "⟦de⟧"
_TAG = re.compile(r"({%.*?%}|{{.*?}}|{#.*?#})", re.S)


def _mark(text: str) -> str:
    """The template with its headings marked; Jinja tags left as they are."""
    out = []
    for line in text.splitlines(keepends=True):
        head = _TAG.split(line)[0]
        if head.lstrip().startswith("#") and not head.lstrip().startswith("#}"):
            hashes = head.lstrip().split(" ")[0]
            line = line.replace(hashes + " ", f"{hashes} {MARK} ", 1)
        out.append(line)
    return "".join(out)


@pytest.fixture
def german(tmp_path, monkeypatch):
    folder = tmp_path / "languages" / "de"
    shutil.copytree(language("en").folder, folder)
    (folder / "language.json").write_text(json.dumps({
        "name": "Deutsch", "locale": "de", "fonts": ["DejaVu Sans"], "fontconfig": "de",
        "font_package": "fonts-dejavu-core"}), encoding="utf-8")
    for path in folder.rglob("*.j2"):
        text = path.read_text(encoding="utf-8")
        if path.name in ("terms.j2", "targets.j2"):  # words as data: mark each value
            text = re.sub(r'(:\s*")', r"\1" + MARK + " ", text)
        path.write_text(_mark(text), encoding="utf-8")
    monkeypatch.setenv("REPORTER_TEMPLATES", str(tmp_path / "languages"))
    runs = tmp_path / "runs"
    for name in ("cpu-transformer-bloat", "cpu-transformer-bloat-fixed"):
        shutil.copytree(FIXTURES / name, runs / name)
    return runs


def _pdf_text(path: Path) -> str:
    return "".join(page.extract_text() for page in PdfReader(str(path)).pages)


def _is_german(md: str) -> None:
    assert MARK in md
    assert re.search(r"\d,\d\u00a0%", md), "percentages as de writes them: 63,9 %"


def test_a_run_renders_in_the_new_language(german):
    res = cli("render", "cpu-transformer-bloat", "--runs", german, "--lang", "de",
              "--format", "md,pdf")
    assert res.code == 0, res.err
    folder = german / "cpu-transformer-bloat"
    md = (folder / "report.de.md").read_text(encoding="utf-8")
    _is_german(md)
    assert re.search(r"^# " + MARK, md, re.M)
    assert re.search(r"\b\d\d\.\d\d\.\d{4}, ", md)  # the date as de writes it
    assert MARK in _pdf_text(folder / "report.de.pdf")
    assert list(folder.glob("report-chart-*.de.svg"))  # charts, named after the language


def test_profiles_read_from_a_table_render_in_the_new_language(german, tmp_path):
    run = load(german / "cpu-transformer-bloat")
    table = tmp_path / "ops.txt"
    table.write_text(format_table(run.sections[0].profile), encoding="utf-8")
    res = cli("analyze", table, "--lang", "de", "--out", tmp_path, "--format", "md,pdf")
    assert res.code == 0, res.err
    md = (tmp_path / "ops.report.de.md").read_text(encoding="utf-8")
    _is_german(md)
    assert MARK in _pdf_text(tmp_path / "ops.report.de.pdf")


def test_a_comparison_renders_in_the_new_language(german, tmp_path):
    res = cli("compare", "cpu-transformer-bloat", "cpu-transformer-bloat-fixed",
              "--runs", german, "--lang", "de", "--format", "md,pdf", "--out", tmp_path)
    assert res.code == 0, res.err
    md = (tmp_path / "compare.de.md").read_text(encoding="utf-8")
    _is_german(md)
    assert MARK in _pdf_text(tmp_path / "compare.de.pdf")


def test_the_new_language_is_offered_and_describes_the_targets(german):
    res = cli("targets", "--lang", "de")
    assert res.code == 0 and res.out.count(MARK) >= 9
    res = cli("render", "cpu-transformer-bloat", "--runs", german, "--lang", "xx")
    assert res.code == 2 and "de, en, ru, zh" in res.err
