"""Charts as SVG files (reporter.render.svg), linked from the Markdown and embedded in the PDF.

The words on a chart come from the language's templates (``terms.j2``: ``chart``),
so that they exist in every language like the rest of the report; numbers are
formatted by the view model (Babel).
"""

from __future__ import annotations

import glob
import math
import textwrap
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import svg
from .markup import clean, mermaid_label, shorten
from .view import CompareView, View


# Figures are 7 in (504 pt) wide, as the PDF's text.
WIDTH = 504.0
BLUE = "#4c72b0"


def _title(c: svg.Canvas, title: str, size: float = 10.0) -> float:
    """The chart's title at its top left; the y below it."""
    return svg.wrapped(c, 8, 2, _wrap_title(title).split("\n"), size)


def share_chart(rows: list[tuple[str, float, str]], title: str,
                fonts: Sequence[str] = ()) -> str:
    """A horizontal bar chart: (operator, share 0..1, label) per bar, largest on top."""
    rows = rows[:10]
    c = svg.Canvas(WIDTH, 25.2 * len(rows) + 72.0, fonts)
    top = _title(c, title) + 4
    names = [_short(name) for name, _, _ in rows]
    values = [100.0 * share for _, share, _ in rows]
    left = 12 + max([svg.text_width(n, 8) for n in names] + [20])
    right = 8 + max([svg.text_width(" " + label, 8) for _, _, label in rows] + [0])
    bottom = c.height - 22
    ax = svg.Axes(c, (left, top, WIDTH - right, bottom), (0.0, max(values + [1.0]) * 1.02),
                  (0.0, 1.0))
    band = (bottom - top) / max(1, len(rows))
    for i, (name, value, (_, _, label)) in enumerate(zip(names, values, rows)):
        y = top + band * i
        c.rect(ax.x0, y + band * 0.1, ax.x(max(0.0, value)) - ax.x0, band * 0.8, BLUE)
        c.text(ax.x(max(0.0, value)), y + band / 2, " " + label, 8)
        c.line(ax.x0 - 3, y + band / 2, ax.x0, y + band / 2)
        c.text(ax.x0 - 5, y + band / 2, name, 8, anchor="end")
    ax.frame()
    ax.linear_xticks()
    return c.svg()


def throughput_chart(steps: list[tuple[str, Any]], title: str,
                     fonts: Sequence[str] = ()) -> str:
    """Median samples/s per step, with the range of the timed windows as error bars."""
    labels = [f"{i + 1}. {_short(name, 28)}" for i, (name, _) in enumerate(steps)]
    widest = max(svg.text_width(label, 8) for label in labels)
    slot = (WIDTH - 70) / max(1, len(steps))
    turn = widest > slot * 0.95  # labels that would touch are turned
    below = 22 + (widest * 0.5 + 8 if turn else 0)
    c = svg.Canvas(WIDTH, 230.4 + (widest * 0.5 if turn else 0), fonts)
    top = _title(c, title) + 4
    high = max(max(t.windows) for _, t in steps)
    ax = svg.Axes(c, (56, top, WIDTH - 12, c.height - below), (0.0, float(len(steps))),
                  (0.0, high * 1.05 if high > 0 else 1.0))
    for i, ((_, t), label) in enumerate(zip(steps, labels)):
        mid = ax.x(i + 0.5)
        c.rect(ax.x(i + 0.1), ax.y(t.median), ax.x(i + 0.9) - ax.x(i + 0.1),
               ax.y(0.0) - ax.y(t.median), BLUE)
        lo, hi = ax.y(min(t.windows)), ax.y(max(t.windows))
        c.line(mid, lo, mid, hi, "#333", 1)
        for y in (lo, hi):
            c.line(mid - 4, y, mid + 4, y, "#333", 1)
        c.line(mid, ax.y1, mid, ax.y1 + 3)
        if turn:
            c.text(mid, ax.y1 + 8, label, 8, anchor="end", rotate=-30)
        else:
            c.text(mid, ax.y1 + 10, label, 8, anchor="middle")
    ax.frame()
    ax.linear_yticks()
    c.text(12, (ax.y0 + ax.y1) / 2, "samples/s", 8, anchor="middle", rotate=-90)
    return c.svg()


# Colours of the memory categories, in MEMORY_CATEGORIES order.
_CATEGORY_COLOURS = ["#4c72b0", "#dd8452", "#8172b3", "#55a868", "#c44e52", "#937860",
                     "#da8bc3", "#8c8c8c"]


def memory_chart(memory: Any, names: dict[str, str], title: str, axis: str,
                 fonts: Sequence[str] = (), ms: str = "ms") -> str:
    """Live tensor memory over one step, stacked by category (MiB against ms), each
    value holding until the next time."""
    from ..model.run import MEMORY_CATEGORIES

    present = [k for k in MEMORY_CATEGORIES if k in memory.timeline_b]
    times = list(memory.timeline_ms)
    n = len(times)
    stacked, running = [], [0.0] * n
    for k in present:
        row = [(b or 0) / 2**20 for b in memory.timeline_b[k]][:n]
        row += [0.0] * (n - len(row))
        lower = running
        running = [a + max(0.0, b) for a, b in zip(running, row)]
        stacked.append((k, lower, running))
    c = svg.Canvas(WIDTH, 244.8, fonts)
    top = _title(c, title) + 4
    keys = [(names.get(k, k), _CATEGORY_COLOURS[MEMORY_CATEGORIES.index(k)])
            for k in present]
    rows = svg.legend_rows(WIDTH, [name for name, _ in keys])
    bottom = c.height - 34 - 11.2 * rows
    high = max(running, default=0.0)
    span = (times[0], times[-1]) if n and times[-1] > times[0] else (0.0, 1.0)
    ax = svg.Axes(c, (44, top, WIDTH - 12, bottom), span, (0.0, high * 1.05 or 1.0))
    for k, lower, upper in stacked:
        if not any(u > lo for u, lo in zip(upper, lower)):
            continue
        edge = []
        for i in range(n):  # each value holds until the next time (a step line)
            end = times[i + 1] if i + 1 < n else times[i]
            edge += [(ax.x(times[i]), ax.y(upper[i])), (ax.x(end), ax.y(upper[i]))]
        back = []
        for i in reversed(range(n)):
            end = times[i + 1] if i + 1 < n else times[i]
            back += [(ax.x(end), ax.y(lower[i])), (ax.x(times[i]), ax.y(lower[i]))]
        c.polygon(edge + back, _CATEGORY_COLOURS[MEMORY_CATEGORIES.index(k)])
    ax.frame()
    below = ax.linear_xticks()
    ax.linear_yticks()
    c.text((ax.x0 + ax.x1) / 2, ax.y1 + below + 5, ms, 8, anchor="middle")
    c.text(10, (ax.y0 + ax.y1) / 2, axis, 8, anchor="middle", rotate=-90)
    svg.legend(c, ax.y1 + below + 20, keys)
    return c.svg()


_PHASE_COLOURS = {"data": "#c44e52", "input_copy": "#dd8452", "forward": "#4c72b0",
                  "loss": "#8172b3", "backward": "#55a868", "optimizer": "#da8bc3",
                  "drain": "#e8a0a0", "other": "#bbbbbb", "compute": "#4c72b0",
                  "communication": "#8172b3",
                  "copy_h2d": "#dd8452", "copy_d2h": "#937860", "copy_d2d": "#ccb974",
                  "memset": "#64b5cd", "idle_data": "#c44e52", "idle_sync": "#e8a0a0",
                  "idle_latency": "#cccccc", "idle_queued": "#bbbbbb",
                  "idle_host": "#dddddd"}


def breakdown_chart(breakdown: Any, names: dict[str, str], titles: dict[str, str],
                    step_word: str, fonts: Sequence[str] = (), ms: str = "ms") -> str:
    """One stacked bar per profiled step (ms): host phases, and device activity on a GPU."""
    from ..analyze.breakdown import DEVICE_ACTIVITIES, HOST_PHASES

    parts: list[tuple[str, Any, tuple[str, ...]]] = [("host", breakdown.host_us, HOST_PHASES)]
    if breakdown.device_us:
        parts.append(("device", breakdown.device_us, DEVICE_ACTIVITIES))
    n, labels, groups = _step_groups(len(breakdown.steps_us), step_word)
    panels = []
    for which, values, order in parts:
        rows = [(key, [_mean(values.get(key) or [], g) / 1e3 for g in groups])
                for key in order]
        panels.append((which, [(key, row) for key, row in rows if any(row)]))
    row_h = 21.6
    # The figure's height as it was with matplotlib (a report keeps its pages), and at
    # least what the bars and the legend need.
    heights = [max(row_h * n + 72 + 86.4 / len(panels),
                   14 + row_h * n + 26 + 11.2 * max(1, svg.legend_rows(
                       WIDTH, [names.get(key, key) for key, _ in rows])) + 14)
               for _, rows in panels]
    c = svg.Canvas(WIDTH, sum(heights), fonts)
    left = 14 + max((svg.text_width(label, 8) for label in labels), default=0.0)
    top = 0.0
    for (which, rows), height in zip(panels, heights):
        y0 = svg.wrapped(c, left, top, [titles[which]], 9)
        totals = [sum(row[i] for _, row in rows) for i in range(n)]
        ax = svg.Axes(c, (left, y0, WIDTH - 14, y0 + row_h * n),
                      (0.0, max(totals + [0.0]) * 1.03 or 1.0), (0.0, 1.0))
        start = [0.0] * n
        for key, row in rows:
            for i, v in enumerate(row):
                if v > 0:
                    c.rect(ax.x(start[i]), ax.y0 + row_h * (i + 0.15),
                           ax.x(start[i] + v) - ax.x(start[i]), row_h * 0.7,
                           _PHASE_COLOURS.get(key, "#999"))
                start[i] += v
        for i, label in enumerate(labels):
            y = ax.y0 + row_h * (i + 0.5)
            c.line(ax.x0 - 3, y, ax.x0, y)
            c.text(ax.x0 - 5, y, label, 8, anchor="end")
        ax.frame()
        below = ax.linear_xticks()
        c.text((ax.x0 + ax.x1) / 2, ax.y1 + below + 5, ms, 8, anchor="middle")
        svg.legend(c, ax.y1 + below + 20,
                   [(names.get(key, key), _PHASE_COLOURS.get(key, "#999")) for key, _ in rows])
        top += height
    return c.svg()


# A chart of more steps than this draws the mean of consecutive steps per bar: a bar per
# step made the figure (and its memory) grow with the steps of a crafted run.
MAX_STEP_BARS = 40


def _step_label(step_word: str, number: str) -> str:
    """A bar's label: the language's word for a step and its number ("step 3"); a word
    with ``{n}`` in it places the number itself (zh "第 {n} 步")."""
    if "{n}" in step_word:
        return step_word.replace("{n}", number)
    return f"{step_word} {number}"


def _step_groups(steps: int, step_word: str) -> tuple[int, list[str], list[range]]:
    """The bars of a chart of ``steps`` steps: how many, their labels, the steps of each."""
    if steps <= MAX_STEP_BARS:
        return steps, [_step_label(step_word, str(i + 1)) for i in range(steps)], [
            range(i, i + 1) for i in range(steps)]
    bounds = [steps * k // MAX_STEP_BARS for k in range(MAX_STEP_BARS + 1)]
    groups = [range(a, b) for a, b in zip(bounds, bounds[1:])]
    return len(groups), [_step_label(step_word, f"{g.start + 1}\u2013{g.stop}")
                         for g in groups], groups


def _mean(values: list[float], steps: range) -> float:
    picked = [values[i] for i in steps if i < len(values)]
    return sum(picked) / len(steps) if picked else 0.0


def roofline_chart(eff: Any, title: str, axes: dict[str, str],
                   fonts: Sequence[str] = ()) -> str:
    """Log-log: arithmetic intensity (FLOP/byte) against achieved FLOP/s; the memory roof
    (bandwidth x intensity) and the compute roofs; operators as points sized by time."""
    points = [o for o in eff.ops if o.flops > 0 and o.bytes > 0 and o.time_us > 0][:20]
    peaks, bandwidth = eff.peaks.flops, eff.peaks.bandwidth
    xs = [o.intensity for o in points]
    lo = min(xs + [bandwidth and min(peaks.values()) / bandwidth / 10]) / 2
    hi = max(xs + [max(peaks.values()) / bandwidth * 10]) * 2
    ys = [o.achieved_flops for o in points] + list(peaks.values()) + [bandwidth * lo]
    ylo, yhi = math.log10(min(ys)), math.log10(max(ys))
    margin = 0.05 * (yhi - ylo or 1.0)
    c = svg.Canvas(WIDTH, 302.4, fonts)
    top = _title(c, title) + 6
    ax = svg.Axes(c, (58, top, WIDTH - 12, c.height - 36), (lo, hi),
                  (10 ** (ylo - margin), 10 ** (yhi + margin)), xlog=True, ylog=True)
    roofs: dict[float, list[str]] = {}  # dtypes of the same peak share one roof
    taken: list[Box] = []  # the boxes of the labels drawn
    for key in sorted(peaks, key=peaks.get):
        roofs.setdefault(peaks[key], []).append(key)
    for peak, keys in roofs.items():
        knee = peak / bandwidth
        corners = [(lo, bandwidth * lo)] + ([(knee, peak)] if lo < knee < hi else []) + [
            (hi, min(peak, bandwidth * hi))]
        c.polyline([(ax.x(x), ax.y(y)) for x, y in corners],
                   "#888888" if "fp32" in keys else BLUE, 1.0, 0.8)
        roof = "/".join(keys)
        c.text(ax.x(hi) - 2, ax.y(peak) - 3, roof, 7, anchor="end", middle=False)
        taken.append(_box(ax.x(hi) - 2, ax.y(peak) - 3, roof, 7, "end"))
    longest = max((o.time_us for o in points), default=1.0)
    for o in points:
        area = 20 + 280 * o.time_us / longest  # points squared, as matplotlib's scatter
        c.circle(ax.x(o.intensity), ax.y(o.achieved_flops), math.sqrt(area / math.pi),
                 "#c44e52" if o.bound == "memory" else "#55a868", 0.6)
    _labels(c, (ax.x0, ax.y0, c.width - 2, ax.y1),
            [(ax.x(o.intensity), ax.y(o.achieved_flops), _short(o.name, 24))
             for o in points[:6]], 6, taken)
    ax.frame()
    xdec = range(math.ceil(ax.xlim[0] - 1e-9), math.floor(ax.xlim[1] + 1e-9) + 1)
    ydec = range(math.ceil(ax.ylim[0] - 1e-9), math.floor(ax.ylim[1] + 1e-9) + 1)
    ax.xticks([10.0 ** k for k in xdec], [_decade(10.0 ** k) for k in xdec])
    ax.yticks([10.0 ** k for k in ydec], [_decade(10.0 ** k) for k in ydec])
    c.text((ax.x0 + ax.x1) / 2, ax.y1 + 22, axes["x"], 8, anchor="middle")
    c.text(10, (ax.y0 + ax.y1) / 2, axes["y"], 8, anchor="middle", rotate=-90)
    return c.svg()


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


def _box(x: float, baseline: float, text: str, size: float, anchor: str) -> Box:
    """Where a line of ``text`` drawn at (x, baseline) lies (an upper estimate)."""
    w = svg.text_width(text, size)
    x0 = x - w if anchor == "end" else x
    return (x0, baseline - 0.8 * size, x0 + w, baseline + 0.25 * size)


def _overlap(a: Box, b: Box) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


# Where a point's label goes, in order of preference: (rows away from the point, side);
# rows up are negative. Its own row, right, is where a lone label goes.
_SPOTS = [(k, side) for k in (0, 1, -1, 2, -2, 3, -3, 4, -4) for side in (1, -1)]


def _labels(c: svg.Canvas, bounds: Box, items: Sequence[tuple[float, float, str]],
            size: float, taken: list[Box]) -> None:
    """Each (x, y, text) written beside its point, clear of the boxes in ``taken``
    (labels drawn already) and inside ``bounds``: above and to the right of the point
    where that is free, else the nearest free row below or above it, on the right or the
    left; where none is free, the place overlapping least. A label moved two rows or more
    from its point gets a thin line to it. Operators whose points sit together (a
    matrix product and its backward) no longer print their names over each other."""
    row = size + 1.0
    for x, y, text in items:
        best: tuple[float, int, Box, float, float, str] | None = None
        for k, side in _SPOTS:
            baseline = y - 3 + k * row if k <= 0 else y + 3 + 0.8 * size + (k - 1) * row
            tx, anchor = (x + 3, "start") if side > 0 else (x - 3, "end")
            box = _box(tx, baseline, text, size, anchor)
            if (box[0] < bounds[0] or box[2] > bounds[2] or box[1] < bounds[1]
                    or box[3] > bounds[3]):
                continue
            clash = sum(_overlap(box, other) for other in taken)
            if best is None or clash < best[0]:
                best = (clash, k, box, tx, baseline, anchor)
            if clash == 0:
                break
        if best is None:  # no place inside the plot at all: where it always went
            best = (0.0, 0, _box(x + 3, y - 3, text, size, "start"), x + 3, y - 3, "start")
        _, k, box, tx, baseline, anchor = best
        if abs(k) >= 2:
            ly = box[3] if box[3] < y else box[1] if box[1] > y else y
            c.line(x, y, box[0] if anchor == "start" else box[2], ly, "#999999", 0.4)
        c.text(tx, baseline, text, size, anchor=anchor, middle=False)
        taken.append(box)


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _decade(value: float, _pos: Any = None) -> str:
    """A log axis' label: "10⁴" at a power of ten, nothing elsewhere."""
    if value <= 0:
        return ""
    exponent = math.log10(value)
    if abs(exponent - round(exponent)) > 1e-9:
        return ""
    return "10" + str(round(exponent)).translate(_SUPERSCRIPT)


# A title longer than this many characters goes on two lines (the figures are 7 in wide);
# Chinese characters are twice as wide.
TITLE_WIDTH = 72


def _wrap_title(title: str) -> str:
    wide = any(unicodedata.east_asian_width(ch) in "WF" for ch in title)
    return "\n".join(textwrap.wrap(title, TITLE_WIDTH // 2 if wide else TITLE_WIDTH)) or title


def _short(name: str, width: int = 48) -> str:
    """A name as one short line of plain text; long names keep their start and end,
    where forward and backward differ."""
    return shorten(clean(name), width)


@dataclass(frozen=True)
class Charts:
    """The charts of one report: SVG files in ``folder`` by (section or mode index, kind:
    share, breakdown, memory, roofline), and Mermaid sources by index (for GitHub)."""

    folder: Path | None = None
    files: Mapping[tuple[int, str], str] = field(default_factory=dict)
    mermaid: Mapping[int, str] = field(default_factory=dict)

    def of(self, i: int) -> dict[str, str | None]:
        """What the template shows for section (or mode) ``i``."""
        return {kind: self.files.get((i, kind))
                for kind in ("share", "breakdown", "memory", "roofline")} | {
                    "mermaid": self.mermaid.get(i)}

    def names(self) -> set[str]:
        return set(self.files.values())


NO_CHARTS = Charts()


def draw(view: View, folder: Path, terms: Any, stem: str, mermaid: bool = False
         ) -> Charts:
    """Draw the report's charts into ``folder``, as SVG files named after the report
    (``<stem>-chart-...``: reports that share a folder never show each other's charts);
    with ``mermaid``, also as Mermaid sources (GitHub draws them in a comment)."""
    from .languages import all_fonts

    # The language's fonts first, then the other languages' (a name may be in any script).
    files = _write_charts(view, Path(folder), terms, stem, all_fonts(view.lang))
    return Charts(Path(folder), files, _mermaid(view, terms) if mermaid else {})


def _write_charts(view: View, folder: Path, terms: Any, stem: str, fonts: Sequence[str]
                  ) -> dict[tuple[int, str], str]:
    """The charts of ``view``, written into ``folder``; when drawing one fails or is
    interrupted, the ones it wrote are removed (those of an earlier report stay)."""
    written: dict[tuple[int, str], str] = {}
    before = ({p.name for p in folder.glob(f"{glob.escape(stem)}-chart-*")}
              if folder.is_dir() else set())
    try:
        _draw_each(view, folder, terms, stem, fonts, written)
    except BaseException:
        for name in set(written.values()) - before:
            (folder / name).unlink(missing_ok=True)
        raise
    return written


def _draw_each(view: View, folder: Path, terms: Any, stem: str, fonts: Sequence[str],
               written: dict[tuple[int, str], str]) -> None:
    from ..store import write_atomic

    # Each name is noted before its file is written, so that an interrupt leaves none.
    if isinstance(view, CompareView):
        for i, m in enumerate(view.modes):
            if len(m.chart_rows) < 2:
                continue
            name = f"{stem}-chart-{i + 1}.{view.lang}.svg"
            written[(i, "share")] = name
            write_atomic(folder / name, throughput_chart(m.chart_rows,
                                                         terms.chart["throughput"], fonts))
        return
    for i, s in enumerate(view.sections):
        rows = s.chart_rows
        if not rows:
            continue
        title = share_title(terms, s)
        name = f"{stem}-chart-{i + 1}-{s.mode or 'profile'}.{view.lang}.svg"
        written[(i, "share")] = name
        write_atomic(folder / name, share_chart(rows, title, fonts))
    for i, s in enumerate(view.sections):
        if not s.breakdown_rows:
            continue
        name = f"{stem}-chart-steps-{i + 1}-{s.mode or 'profile'}.{view.lang}.svg"
        written[(i, "breakdown")] = name
        write_atomic(folder / name, breakdown_chart(
            s.breakdown_rows, {**terms.phase, **terms.activity}, terms.chart["steps"],
            terms.chart["step"], fonts, terms.chart["ms"]))
    for i, s in enumerate(view.sections):
        if not s.memory_rows:
            continue
        name = f"{stem}-chart-memory-{i + 1}-{s.mode or 'profile'}.{view.lang}.svg"
        written[(i, "memory")] = name
        write_atomic(folder / name, memory_chart(s.memory_rows, terms.category,
                                                 terms.chart["memory"], terms.chart["mib"],
                                                 fonts, terms.chart["ms"]))
    for i, s in enumerate(view.sections):
        if not s.roofline_points:
            continue
        name = f"{stem}-chart-roofline-{i + 1}-{s.mode or 'profile'}.{view.lang}.svg"
        written[(i, "roofline")] = name
        write_atomic(folder / name, roofline_chart(s.roofline_points,
                                                   terms.chart["roofline"],
                                                   terms.chart["roofline_axes"], fonts))


def share_title(terms: Any, section: Any) -> str:
    """The operator-share chart's title in the report's language, with the device's
    runtime named (CUDA, ROCm, XPU); the report's image text says the same
    (templates/layout/report.md.j2)."""
    return str(terms.chart["share"][section.chart_basis]).replace("{runtime}",
                                                                  section.runtime)


def _mermaid(view: View, terms: Any) -> dict[int, str]:
    """Charts as Mermaid blocks, which GitHub draws in a comment without hosted images:
    by section, a pie of the operators' shares, or by mode of a comparison, bars of the
    throughput per step."""
    out: dict[int, str] = {}
    if isinstance(view, CompareView):
        for i, m in enumerate(view.modes):
            steps = m.chart_rows
            if len(steps) < 2:
                continue
            names = ", ".join(f'"{k}. {mermaid_label(n)}"' for k, (n, _) in enumerate(steps, 1))
            values = ", ".join(f"{t.median:.4g}" for _, t in steps)
            title = terms.chart["throughput"].replace('"', "'")
            out[i] = (f'xychart-beta\n    title "{title}"\n    x-axis [{names}]\n'
                      f'    y-axis "samples/s"\n    bar [{values}]')
        return out
    for i, s in enumerate(view.sections):
        rows = s.chart_rows
        if not rows:
            continue
        title = share_title(terms, s).replace('"', "'")
        lines = [f"pie showData title {title}"]
        for name, share, _ in rows:
            lines.append(f'    "{mermaid_label(name)}" : {100 * share:.1f}')
        rest = 100 * (1 - sum(share for _, share, _ in rows))
        if rest >= 0.05:
            lines.append(f'    "{terms.chart["other"]}" : {rest:.1f}')
        out[i] = "\n".join(lines)
    return out
