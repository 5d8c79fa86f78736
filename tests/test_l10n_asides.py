"""Rendering asides of the l10n review of 2026-12-03, held in every language: Markdown the
reader sees as the report meant it, not as text that happened to print.

- no escaped backtick (\\`): a note of terms.j2 quotes its code as code (``with_code``);
- the summary is a tight list: no blank line between its items (a blank line made a loose
  list of it where a GPU's memory was not recorded);
- a finding's indented paragraphs (the advice, the worth) each start after a blank line,
  else Markdown folds them into the paragraph above (straggler-rank's advice was);
- the closing line names the Chrome trace of every section, not the first one's alone.

The inputs are the stored fixture runs (as tests/test_golden.py renders them), a table
written from one of them and read back (as tests/test_new_language.py does), and the
stored CPU run beside a slower copy of itself as a second rank (as
tests/test_breakdown.py does), which fires straggler-rank.
"""

from __future__ import annotations

import copy
import re

import pytest

from conftest import FIXTURES, cli, with_a_slower_rank
from reporter.analyze.analyzer import analyze_run
from reporter.pipeline import report_view
from reporter.render.keytable import format_table
from reporter.render.report import render_markdown
from reporter.render.view import LANGUAGES, run_view
from reporter.store import load

RUNS = FIXTURES / "runs"
FIXTURE_RUNS = sorted(p.name for p in RUNS.iterdir() if (p / "run.json").is_file())
SUMMARY = {"en": "Summary", "ru": "Краткие результаты", "zh": "概要"}
ADVICE = {"en": "**What to change:**", "ru": "**Что сделать:**", "zh": "**优化建议：**"}
LOGS = re.compile(r"<details>.*?</details>", re.S)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
HEADING = re.compile(r"^#{1,6} ")


def _prose(md: str) -> str:
    """The report without its logs and fenced blocks (the profiler's text, not ours)."""
    return FENCE.sub("", LOGS.sub("", md))


def _summaries(lines: list[str], lang: str) -> list[list[str]]:
    """The lines under each summary heading, up to the next heading."""
    out: list[list[str]] = []
    for i, line in enumerate(lines):
        if HEADING.match(line) and line.rstrip().endswith(SUMMARY[lang]):
            block = []
            for rest in lines[i + 1:]:
                if HEADING.match(rest):
                    break
                block.append(rest)
            out.append(block)
    return out


def _asides(md: str, lang: str) -> list[str]:
    """What reads wrong in a rendered report: one line each."""
    bad = []
    text = _prose(md)
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if "\\`" in line:
            bad.append(f"line {n}: an escaped backtick: {line}")
        if line.startswith("    **") and n > 1 and lines[n - 2].strip():
            bad.append(f"line {n}: folded into the paragraph above it: {line}")
    summaries = _summaries(lines, lang)
    if not summaries:
        bad.append("no summary heading")
    for block in summaries:
        items = [i for i, line in enumerate(block) if line.startswith("- ")]
        for a, b in zip(items, items[1:]):
            if any(not line.strip() for line in block[a:b]):
                bad.append(f"a loose summary list: a blank line before {block[b]}")
    return bad


def _footer(md: str) -> str:
    return [line for line in md.splitlines() if line.strip()][-1]


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("fixture", FIXTURE_RUNS)
def test_a_stored_run_renders_as_markdown_means_it(fixture, lang):
    run = load(RUNS / fixture)
    md = render_markdown(report_view(run, lang))
    assert not _asides(md, lang), "\n".join(_asides(md, lang))
    footer = _footer(md)
    for s in run.sections:
        if s.trace:
            assert f"`{s.trace}`" in footer, (s.trace, footer)


def test_a_summary_without_the_gpu_memory_is_still_a_tight_list():
    """The case the review found (cuda-seed001: a device, no device memory recorded)."""
    run = load(RUNS / "cuda-seed001")
    for lang in LANGUAGES:
        md = render_markdown(report_view(run, lang))
        (summary,) = _summaries(_prose(md).splitlines(), lang)
        items = [line for line in summary if line.startswith("- ")]
        assert len(items) >= 3, summary
        assert "\n".join(summary).strip().count("\n\n- ") == 0, summary


def test_a_two_section_run_names_both_traces():
    run = load(RUNS / "cpu-transformer")
    traces = [s.trace for s in run.sections]
    assert len(traces) == 2 and all(traces)
    for lang in LANGUAGES:
        footer = _footer(render_markdown(report_view(run, lang)))
        assert all(f"`{t}`" in footer for t in traces), footer


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_notes_of_a_table_quote_their_code_as_code(lang, tmp_path):
    """A table has no timeline and no shapes: the notes that say so (terms.j2:
    breakdown_note.table, efficiency_note.no-shapes, memory_note.imported) show code
    spans, not backslashes."""
    run = load(RUNS / "cpu-transformer-bloat")
    table = tmp_path / "ops.txt"
    table.write_text(format_table(run.sections[0].profile), encoding="utf-8")
    res = cli("analyze", table, "--lang", lang, "--out", tmp_path, "--format", "md")
    assert res.code == 0, res.err
    md = (tmp_path / f"ops.report.{lang}.md").read_text(encoding="utf-8")
    assert not _asides(md, lang), "\n".join(_asides(md, lang))
    for code in ("`prof.export_chrome_trace`", "`record_shapes=True`", "`reporter run`"):
        assert code in md, (code, md)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_straggler_ranks_advice_is_its_own_paragraph(lang):
    """The stored CPU run beside a copy of itself whose steps take 30% longer, as a
    second rank: straggler-rank fires, and its advice starts a paragraph."""
    run = load(RUNS / "cpu-transformer")
    with_a_slower_rank(run)
    analyses = analyze_run(run)
    assert "straggler-rank" in {f.rule for f, _ in analyses[0].main + analyses[0].minor}
    md = render_markdown(run_view(run, lang, analyses))
    assert not _asides(md, lang), "\n".join(_asides(md, lang))
    lines = _prose(md).splitlines()
    lead = {"en": "Rank 1 holds", "ru": "Ранг 1 тормозит", "zh": "Rank 1 拖慢了"}[lang]
    at = next(i for i, line in enumerate(lines) if line.startswith(f"- **{lead}"))
    advice = next(i for i in range(at + 1, len(lines)) if ADVICE[lang] in lines[i])
    assert not lines[advice - 1].strip(), "\n".join(lines[at:advice + 1])


def test_elementwise_blowups_advice_is_for_what_was_there():
    """The stored bloated transformer repeats tensors: the repeat and einsum advice. The
    same finding without the repeat (the broadcast product its shapes show) gets the
    matrix-product advice alone, and without the shapes either (a lone element-wise
    chain: tables/15's aten::pow), advice about intermediates, neither repeat nor einsum."""
    from conftest import render_finding
    from reporter.analyze.analyzer import analyze_section

    run = load(RUNS / "cpu-transformer-bloat")
    (f,) = [f for f in analyze_section(run.sections[0], run.target.get("batch_size")).findings
            if f.rule == "elementwise-blowup"]
    assert f.evidence.materialisers
    no_repeat = copy.deepcopy(f)
    no_repeat.evidence.materialisers, no_repeat.evidence.materialised_share = [], 0.0
    no_repeat.evidence.pairwise_share = 0.4
    alone = copy.deepcopy(no_repeat)
    alone.evidence.pairwise_share = None
    for lang in LANGUAGES:
        said = {name: render_finding(x, lang).split(ADVICE[lang])[1]
                for name, x in (("repeat", f), ("no_repeat", no_repeat), ("alone", alone))}
        assert "`repeat`" in said["repeat"] and "einsum" in said["repeat"], said
        assert "`repeat`" not in said["no_repeat"] and "einsum" in said["no_repeat"], said
        assert "`repeat`" not in said["alone"] and "einsum" not in said["alone"], said
        assert "`torch.compile`" in said["alone"], said
