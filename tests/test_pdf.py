"""PDF handouts: read back with poppler, in every language, with fonts that cover the script."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, cli

from reporter.errors import WorkFailed
from reporter.model.profile import Op, Profile
from reporter.render.pdf import check_fonts
from reporter.render.report import write_report
from reporter.render.view import LANGUAGES
from reporter.pipeline import profiles_view, report_view
from reporter.store import load

pytestmark = pytest.mark.skipif(shutil.which("pdftotext") is None,
                                reason="poppler-utils is not installed "
                                       "(scripts/setup.sh installs it)")

TITLES = {"en": "Profiling report", "ru": "Результаты профайлинга", "zh": "性能分析报告"}
FINDING = {"en": "What to change", "ru": "Что сделать", "zh": "优化建议"}


def _text(pdf: Path, *args: str) -> str:
    return subprocess.run(["pdftotext", *args, str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("fixture", ["cpu-transformer-bloat", "cuda-seed001"])
def test_pdf_in_every_language(tmp_path, fixture, lang):
    view = report_view(load(FIXTURES / "runs" / fixture), lang)
    pdf = write_report(view, tmp_path, "pdf")
    text = _text(pdf)
    flat = " ".join(text.split())
    assert TITLES[lang] in flat and FINDING[lang] in flat
    s = view.sections[0]
    for number in (s.self_cpu_total, s.findings[0]["share"]):
        assert " ".join(number.split()) in flat, number  # the numbers, formatted for the locale
    assert "aten::mul" in flat
    assert list(tmp_path.glob("report-chart-1-*.svg"))  # the chart is drawn and embedded
    fonts = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True,
                           check=True).stdout.splitlines()[2:]
    assert fonts and all(line.split()[-5] == "yes" for line in fonts)  # all embedded
    names = " ".join(line.split()[0] for line in fonts)
    if lang == "zh":
        assert re.search(r"WenQuanYi|CJK", names), names
    else:
        assert "DejaVu" in names, names
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True).stdout
    assert re.search(r"^Title:\s+" + re.escape(TITLES[lang]), info, re.M), info
    assert re.search(r"^CreationDate:\s+\S", info, re.M), info
    from pypdf import PdfReader
    assert PdfReader(str(pdf)).trailer["/Root"]["/Lang"] == lang


def test_names_with_markup_stay_text_and_wrap(tmp_path):
    long = ("void at::native::(anonymous namespace)::vectorized_elementwise_kernel<4, "
            "at::native::BinaryFunctor<float, float, float, at::native::MulFunctor<float> >, "
            "at::detail::Array<char*, 3> >(int, at::native::BinaryFunctor<float, float, float, "
            "at::native::MulFunctor<float> >, at::detail::Array<char*, 3>)")
    ops = [Op("<script>alert(1)</script>", calls=3, self_cpu_us=700, cpu_total_us=700),
           Op("a & b | c", calls=2, self_cpu_us=200, cpu_total_us=200),
           Op(long, calls=1, self_cpu_us=100, cpu_total_us=100)]
    profile = Profile(label="names", self_cpu_us=1000, ops=ops)
    pdf = write_report(profiles_view([profile], "names.txt", "en"), tmp_path, "pdf")
    dense = "".join(_text(pdf).split())  # wrapped names break across lines
    assert "<script>alert(1)</script>" in dense and "a&b|c" in dense
    assert "MulFunctor<float>>" in dense
    # Nothing runs past the right edge of its page.
    bbox = _text(pdf, "-bbox")
    for page in re.finditer(r'<page width="([\d.]+)".*?</page>', bbox, re.S):
        width = float(page.group(1))
        for x in re.findall(r'xMax="([\d.]+)"', page.group(0)):
            assert float(x) <= width, (x, width)


def test_no_font_for_the_script_is_one_clear_line(tmp_path, monkeypatch, stored):
    conf = tmp_path / "fonts.conf"  # a fontconfig that knows no fonts at all
    conf.write_text('<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd">'
                    f"<fontconfig><cachedir>{tmp_path}/cache</cachedir></fontconfig>")
    monkeypatch.setenv("FONTCONFIG_FILE", str(conf))
    with pytest.raises(WorkFailed, match="fonts-wqy-microhei"):
        check_fonts("zh")
    root, folder = stored("cpu-tensor-ops")
    res = cli("render", folder, "--lang", "zh", "--format", "pdf")
    assert res.code == 1
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "install" in lines[0] and "Traceback" not in res.err
    assert not (folder / "report.zh.pdf").exists()


@pytest.mark.slow
def test_run_writes_markdown_and_pdf(runs):
    res = cli("run", "--target", "tensor-ops", "--device", "cpu", "--lang", "ru",
              "--format", "md,pdf", "--out", runs, "--quiet")
    assert res.code == 0, res.err
    paths = [Path(p) for p in res.out.split()]
    assert sorted(p.suffix for p in paths) == [".md", ".pdf"]
    md = paths[0].read_text() if paths[0].suffix == ".md" else paths[1].read_text()
    chart = re.search(r"!\[[^\]]+\]\(([^)]*-chart-[^)]+\.svg)\)", md)
    assert chart and (paths[0].parent / chart.group(1)).is_file()


@pytest.mark.slow
def test_an_interrupt_between_two_formats_leaves_none_of_them(tmp_path, monkeypatch):
    """#35: Ctrl-C after the Markdown was written and before the PDF leaves neither, nor
    the charts; a report that was there before is kept as it was (issue 70, S2: the new
    set is published whole or not at all)."""
    import reporter.render.report as report
    from reporter.render.report import write_reports

    view = report_view(load(FIXTURES / "runs" / "cpu-transformer"), "en")
    real, calls = report.write_atomic, []

    def interrupted(path, content):
        calls.append(path)
        if len(calls) == 2:  # the second format: the user pressed Ctrl-C
            raise KeyboardInterrupt
        return real(path, content)

    monkeypatch.setattr(report, "write_atomic", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_reports(view, tmp_path, ["md", "pdf"])
    assert [p.name for p in calls] == ["report.en.md", "report.en.pdf"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    (tmp_path / "report.en.md").write_text("an earlier report")
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        write_reports(view, tmp_path, ["md", "pdf"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.en.md"]
    assert (tmp_path / "report.en.md").read_text() == "an earlier report"


def test_table_cells_are_styled_by_class_and_code_cells_keep_their_text():
    """A cell's alignment is a class, not a style attribute (WeasyPrint parses each of
    those as a style sheet), and a cell that is all code is a code cell."""
    from reporter.render.pdf import to_html

    md = ("| name | shapes | time |\n| --- | --- | ---: |\n"
          "| `aten::mm` | `[[8, 64], <b>]` | 1.2 ms |\n| `a` and `b` | `x` y | 3 |\n")
    body = to_html(md, "en", None).split("<body>")[1]
    assert not re.search(r"<t[hd][^>]* style=", body)
    assert '<th class="right">time</th>' in body and '<td class="right">1.2 ms</td>' in body
    assert '<td class="code">aten::mm</td>' in body
    assert '<td class="code">[[8, 64], &lt;b&gt;]</td>' in body  # escaped, not a tag
    assert "<td><code>a</code> and <code>b</code></td>" in body  # mixed: kept as it was
    assert "<td><code>x</code> y</td>" in body


def _tables(document) -> list[tuple[float, list[float]]]:
    """Each table's width and its columns' widths, as WeasyPrint laid them out."""
    from weasyprint.formatting_structure import boxes

    found: dict[int, tuple[float, list[float]]] = {}

    def walk(box) -> None:
        if isinstance(box, boxes.TableBox):
            found.setdefault(id(box.element), (box.width, list(box.column_widths)))
            return
        for child in getattr(box, "children", []):
            walk(child)

    for page in document.pages:
        walk(page._page_box)
    return list(found.values())


@pytest.mark.slow
@pytest.mark.parametrize("fixture, lang", [("cpu-transformer", "ru"),
                                           ("cuda-h100-transformer", "zh")])
def test_the_tables_given_widths_are_those_weasyprint_works_out(tmp_path, monkeypatch,
                                                                 fixture, lang):
    """reporter/render/columns.py: the widths worked out once, and the layout fixed, are
    WeasyPrint's automatic layout's own (within 1% of the table), on the same pages."""
    import weasyprint

    from reporter.render import columns, pdf, report
    from reporter.render.charts import draw

    folder = tmp_path / fixture
    shutil.copytree(FIXTURES / "runs" / fixture, folder)
    view = report_view(load(folder), lang)
    charts = draw(view, folder, report.terms(lang), "report")
    markdown = report.render_markdown(view, report.RenderOptions(), charts)
    fixed = pdf.to_html(markdown, lang, None)
    monkeypatch.setattr(columns, "fix", lambda body, *fonts: body)
    auto = pdf.to_html(markdown, lang, None)
    assert fixed.count('<table class="fixed">') == auto.count("<table>") >= 5

    def laid_out(page: str):
        return weasyprint.HTML(string=page, base_url=str(folder) + "/",
                               url_fetcher=pdf.url_fetcher(folder, charts.names())).render()

    ours, theirs = laid_out(fixed), laid_out(auto)
    assert len(ours.pages) == len(theirs.pages)
    pairs = list(zip(_tables(ours), _tables(theirs)))
    assert len(pairs) == auto.count("<table>")
    for (width, mine), (_, own) in pairs:
        assert len(mine) == len(own)
        assert max(abs(a - b) for a, b in zip(mine, own)) <= 0.01 * width, (mine, own)


def test_a_table_wider_than_the_page_or_fonts_that_cannot_be_read_keep_the_automatic_layout(
        monkeypatch):
    from reporter.render import columns
    from reporter.render.pdf import to_html

    wide = "| a | b |\n| --- | --- |\n| x | " + "y" * 400 + " |\n"
    narrow = "| a | b |\n| --- | ---: |\n| `aten::mm` | 1 ms |\n"
    assert 'class="fixed"' not in to_html(wide, "en", None)
    assert '<table class="fixed"><colgroup><col style="width: ' in to_html(narrow, "en", None)
    columns.fonts.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")  # no fontconfig to ask
    try:
        assert 'class="fixed"' not in to_html(narrow, "en", None)
    finally:
        columns.fonts.cache_clear()


def test_column_widths_follow_the_automatic_layout_rules():
    """columns.widths on a hand-made table, each character an em wide: a heading breaks
    at spaces and after a slash but not at a no-break space; cells after the first stay
    on one line; the first column takes its 42% and the others share the rest by their
    widest width; squeezed, each column keeps its longest unbreakable piece."""
    from reporter.render import columns

    em, pad, size = len, columns.PADDING_PT, columns.SIZE_PT
    rows = [[(True, "", "Operator"), (True, "right", "FLOP/byte"), (True, "right", "ab\xa0cd ef")],
            [(False, "code", "aten::mm"), (False, "right", "12"), (False, "right", "1")]]
    got = columns.widths(rows, em, em, em, total=1000.0)
    assert got is not None and abs(sum(got) - 1000.0) < 1e-6
    assert abs(got[0] - 420.0) < 1e-6  # td:first-child { width: 42% }
    widest = [9 * size + pad, 8 * size + pad]  # "FLOP/byte", "ab cd ef"
    for width, w in zip(got[1:], widest):
        assert abs(width - (w + (580.0 - sum(widest)) * w / sum(widest))) < 1e-6
    narrowest = [8 * size + pad, 5 * size + pad, 5 * size + pad]  # "Operator", "FLOP/", "ab cd"
    squeezed = columns.widths(rows, em, em, em, total=sum(narrowest))
    assert squeezed is not None
    assert all(abs(a - b) < 1e-6 for a, b in zip(squeezed, narrowest)), squeezed
    assert columns.widths(rows, em, em, em, total=sum(narrowest) - 1) is None  # too wide
    assert columns.widths([rows[0], rows[1][:2]], em, em, em) is None  # ragged rows
