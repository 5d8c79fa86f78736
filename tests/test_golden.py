"""Reports rendered from stored runs, compared with golden files in tests/gold/.

The fixtures are real CPU runs (tests/fixtures/runs/), so the output is fixed;
only the reporter-dependent noise listed in SCRUB is replaced. On a mismatch
the actual output is written beside the gold file as ``*.actual.md``. To accept
a change on purpose: ``REPORTER_UPDATE_GOLD=1 pytest tests/test_golden.py``,
then read the diff before committing (tests/gold/README.md).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from reporter.render.report import render_markdown
from reporter.store import load
from reporter.render.view import LANGUAGES
from reporter.pipeline import report_view
from conftest import FIXTURES

GOLD = Path(__file__).resolve().parent / "gold"
SCRUB = [
    (re.compile(r"torch \d+\.\d+\.\d+[^ ·]*"), "torch X"),
]
FIXTURE_RUNS = sorted(p.name for p in (FIXTURES / "runs").iterdir() if (p / "run.json").is_file())


def scrub(text: str) -> str:
    for pattern, repl in SCRUB:
        text = pattern.sub(repl, text)
    return text


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("fixture", FIXTURE_RUNS)
def test_report_matches_gold(fixture, lang):
    run = load(FIXTURES / "runs" / fixture)
    actual = scrub(render_markdown(report_view(run, lang)))
    gold = GOLD / f"{fixture}.{lang}.md"
    if os.environ.get("REPORTER_UPDATE_GOLD"):
        gold.write_text(actual, encoding="utf-8")
    expected = gold.read_text(encoding="utf-8")
    saved = gold.with_suffix(".actual.md")
    if actual != expected:
        saved.write_text(actual, encoding="utf-8")
    else:
        saved.unlink(missing_ok=True)
    assert actual == expected, f"differs from {gold}; see {gold.with_suffix('.actual.md')}"
