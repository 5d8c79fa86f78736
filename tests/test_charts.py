"""The report's charts (reporter.render.svg): well-formed SVG whatever the names, bars that
measure their values, the words of the report's language, and the pages of the PDF."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from conftest import FIXTURES

from reporter.pipeline import report_view
from reporter.render import charts, svg
from reporter.render.report import write_report
from reporter.store import load

NS = "{http://www.w3.org/2000/svg}"


def _tree(text: str) -> ET.Element:
    return ET.fromstring(text)  # raises on anything that is not well-formed XML


def _words(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(NS + "text")]


def test_names_that_are_not_xml_are_drawn_as_text():
    names = ["<script>alert(1)</script>", "a & b \"q\" 'r'", "ctl\x01\x08\x1f\ufffe",
             "$5 and $6", "名字" * 40]
    rows = [(n, 0.1 * (i + 1), f"{10 * (i + 1)}%") for i, n in enumerate(names)]
    root = _tree(charts.share_chart(rows, "T <&>", ["Noto Sans", "x'); }"]))
    words = _words(root)
    assert "T <&>" in words and "<script>alert(1)</script>" in words
    assert "a & b \"q\" 'r'" in words
    assert any(w.startswith("ctl") and w.isprintable() for w in words)  # no control character
    assert not list(root.iter(NS + "script"))
    style = root.find(NS + "style").text
    assert "'Noto Sans'" in style and "x')" not in style  # a family that could break out


def test_share_bars_measure_their_shares():
    rows = [("aten::mm", 0.5, "50%"), ("aten::add", 0.25, "25%"), ("aten::mul", 0.05, "5%")]
    root = _tree(charts.share_chart(rows, "share"))
    bars = [r for r in root.iter(NS + "rect") if r.get("fill") == charts.BLUE]
    widths = [float(r.get("width")) for r in bars]
    assert len(widths) == 3
    assert widths[0] / widths[1] == pytest.approx(2.0, rel=1e-3)
    assert widths[0] / widths[2] == pytest.approx(10.0, rel=1e-3)
    # Every label sits to the left of the plot, clear of it.
    left = min(float(r.get("x")) for r in bars)
    for t in root.iter(NS + "text"):
        if t.text in ("aten::mm", "aten::add", "aten::mul"):
            assert t.get("text-anchor") == "end" and float(t.get("x")) < left


def test_ticks_are_round_and_cover_the_range():
    assert svg.ticks(0, 18.4) == [0, 5, 10, 15]
    assert svg.ticks(0, 63.9) == [0, 20, 40, 60]
    assert svg.ticks(0, 63.9, most=12) == [0, 10, 20, 30, 40, 50, 60]
    assert svg.ticks(0.0, 0.003)[-1] == pytest.approx(0.003)
    values = svg.ticks(0, 0.9)
    assert [svg.tick_label(v, values) for v in values] == ["0.0", "0.2", "0.4", "0.6", "0.8"]
    values = svg.ticks(0, 13)
    assert [svg.tick_label(v, values) for v in values] == ["0.0", "2.5", "5.0", "7.5", "10.0",
                                                           "12.5"]
    assert svg.ticks(5, 5) == [5]


def test_text_width_counts_wide_characters_twice():
    assert svg.text_width("ab", 10) == pytest.approx(12)
    assert svg.text_width("算子", 10) == pytest.approx(20)


@pytest.mark.parametrize("lang,title", [("en", "Live tensor memory"), ("ru", "Память"),
                                        ("zh", "内存")])
def test_every_chart_of_a_run_is_well_formed_and_in_its_language(tmp_path, lang, title):
    view = report_view(load(FIXTURES / "runs" / "cpu-transformer"), lang)
    write_report(view, tmp_path, "md")
    files = {f.name.split("chart-", 1)[1].split("-")[0]: f for f in tmp_path.glob("*.svg")}
    assert {"1", "2", "memory", "roofline", "steps"} <= set(files), sorted(files)
    for f in files.values():
        root = _tree(f.read_text())
        assert float(root.get("height").removesuffix("pt")) > 100
    assert "aten::addmm" in _words(_tree(files["1"].read_text()))
    assert any(title in w for w in _words(_tree(files["memory"].read_text())))
    assert view.sections[0].breakdown_rows is not None
    step = {"en": "step 1", "ru": "шаг 1", "zh": "第 1 步"}[lang]
    assert step in _words(_tree(files["steps"].read_text()))


def test_the_throughput_chart_turns_labels_that_would_touch():
    class T:
        def __init__(self, median, windows):
            self.median, self.windows = median, windows

    few = [("base", T(100.0, [90.0, 110.0])), ("fixed", T(200.0, [190.0, 230.0]))]
    root = _tree(charts.throughput_chart(few, "throughput"))
    assert not [t for t in root.iter(NS + "text") if t.get("transform") and t.text[0].isdigit()]
    bars = [r for r in root.iter(NS + "rect") if r.get("fill") == charts.BLUE]
    heights = [float(r.get("height")) for r in bars]
    assert heights[1] / heights[0] == pytest.approx(2.0, rel=1e-3)
    many = [(f"a long run name number {i}", T(100.0, [100.0])) for i in range(12)]
    root = _tree(charts.throughput_chart(many, "throughput"))
    assert len([t for t in root.iter(NS + "text") if t.get("transform")
                and t.text[0].isdigit()]) == 12


def _area(points):
    return abs(sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1)
                   in zip(points, points[1:] + points[:1]))) / 2


def test_a_step_outline_keeps_its_corners_only():
    times, values = [0, 1, 2, 3, 4, 5], [1, 1, 1, 3, 3, 2]
    edge = []
    for i, (t, v) in enumerate(zip(times, values)):
        edge += [(t, v), (times[min(i + 1, 5)], v)]
    outline = edge + [(5, 0), (0, 0)]
    kept = svg.straight(outline)
    assert kept == [(0, 1), (3, 1), (3, 3), (5, 3), (5, 0), (0, 0)]
    assert _area(kept) == pytest.approx(_area(outline))


def _label_boxes(root: ET.Element, size: str) -> list[tuple[str, tuple]]:
    """The boxes (x0, y0, x1, y1) of the chart's text of font size ``size``: its width as
    svg.text_width estimates it, from 0.8 of the size above the baseline to 0.25 below."""
    out = []
    for t in root.iter(NS + "text"):
        if t.get("font-size") == size:
            x, y, w = float(t.get("x")), float(t.get("y")), svg.text_width(t.text, float(size))
            x0 = x - w if t.get("text-anchor") == "end" else x
            out.append((t.text, (x0, y - 0.8 * float(size), x0 + w, y + 0.25 * float(size))))
    return out


def _apart(a: tuple, b: tuple) -> bool:
    return a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


def _roofline(ops):
    from types import SimpleNamespace

    from reporter.analyze.efficiency import OpEfficiency
    peaks = SimpleNamespace(flops={"fp32": 1e12, "bf16": 4e12}, bandwidth=1e11)
    rows = [OpEfficiency(name=n, dtypes=["fp32"], calls=1, flops=f, bytes=b, time_us=t,
                         roof_us=1.0, bound="compute", matrix=True) for n, f, b, t in ops]
    return _tree(charts.roofline_chart(SimpleNamespace(ops=rows, peaks=peaks), "roofline",
                                       {"x": "FLOP/byte", "y": "FLOP/s"}))


def test_the_roofline_labels_points_that_sit_together_without_writing_over_each_other():
    # six operators at nearly one point (a product and its backward, at one shape): their
    # names were written on top of each other
    ops = [(f"aten::operator_number_{i}", 1e9 * (1 + i / 100), 1e7, 1000.0 - i)
           for i in range(6)]
    boxes = _label_boxes(_roofline(ops), "6")
    assert sorted(name for name, _ in boxes) == sorted(name for name, *_ in ops)
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            assert _apart(box_a, box_b), (a, b, box_a, box_b)
    # the roofs' labels are left clear too
    for name, box in boxes:
        for roof, roof_box in _label_boxes(_roofline(ops), "7"):
            assert _apart(box, roof_box), (name, roof)


def test_a_lone_point_is_labelled_above_and_right_of_it():
    root = _roofline([("aten::mm", 1e9, 1e7, 1000.0)])
    circle = next(root.iter(NS + "circle"))
    (text,) = [t for t in root.iter(NS + "text") if t.get("font-size") == "6"]
    assert float(text.get("x")) == pytest.approx(float(circle.get("cx")) + 3, abs=0.01)
    assert float(text.get("y")) == pytest.approx(float(circle.get("cy")) - 3, abs=0.01)
    assert not [line for line in root.iter(NS + "line") if line.get("stroke") == "#999999"]


def test_a_step_label_puts_the_number_where_its_language_does():
    """"step 3", "шаг 3"; zh numbers a step inside its word: "第 3 步", not "步 3"
    (review 2026-12 Z12), a range of steps too."""
    assert charts._step_groups(2, "step")[1] == ["step 1", "step 2"]
    assert charts._step_groups(2, "第 {n} 步")[1] == ["第 1 步", "第 2 步"]
    n, labels, _ = charts._step_groups(charts.MAX_STEP_BARS * 2, "第 {n} 步")
    assert n == charts.MAX_STEP_BARS and labels[0] == "第 1\u20132 步"


@pytest.mark.parametrize("lang", ["en", "ru", "zh"])
def test_every_legend_fits_its_chart(tmp_path, lang):
    """A GPU run's step chart names eleven activities, some long ("простой: работа уже в
    очереди, GPU ждёт завершения зависимости или события"): the legend falls to fewer
    columns, and the chart is tall enough for its rows (the last ones were cut off below
    the canvas in the ru PDF of corpus trace 07)."""
    view = report_view(load(FIXTURES / "runs" / "cuda-h200-transformer"), lang)
    write_report(view, tmp_path, "md")
    # the share chart's image text names the runtime, as its title does
    (md,) = tmp_path.glob("*.md")
    assert "{runtime}" not in md.read_text() and "CUDA" in md.read_text()
    charts_ = list(tmp_path.glob("*.svg"))
    assert any("steps" in f.name for f in charts_)
    for f in charts_:
        root = _tree(f.read_text())
        height = float(root.get("viewBox").split()[3])
        lowest = max(float(t.get("y")) for t in root.iter("{http://www.w3.org/2000/svg}text"))
        assert lowest + 7 <= height, (f.name, lowest, height)
