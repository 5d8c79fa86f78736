"""Charts as SVG files, drawn with matplotlib, linked from the Markdown and embedded in the PDF.

The words on a chart come from the language's templates (``terms.j2``: ``chart``),
so that they exist in every language like the rest of the report; numbers are
formatted by the view model (Babel).
"""

from __future__ import annotations

import glob
import io
import math
import textwrap
import unicodedata
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .markup import clean, mermaid_label, shorten
from .view import CompareView, View


def _pyplot():
    """pyplot, set up for our charts (the fonts are set by write_charts)."""
    import matplotlib

    matplotlib.use("svg", force=True)
    import matplotlib.pyplot as plt

    # Words as SVG text in the fonts of the report's language (draw sets them), not
    # as one path per glyph: a chart's thousands of glyph outlines were most of the
    # time WeasyPrint spent on a PDF, and of matplotlib's own (bench/render.py).
    plt.rcParams.update({"svg.fonttype": "none",
                         "text.parse_math": False,  # names are text: "$5 and $6" is no formula
                         "text.usetex": False,
                         "svg.hashsalt": "reporter",  # the same input gives the same file
                         "font.size": 9})
    return plt


def share_chart(rows: list[tuple[str, float, str]], title: str) -> str:
    """A horizontal bar chart: (operator, share 0..1, label) per bar, largest on top."""
    plt = _pyplot()
    rows = rows[:10]
    fig, ax = plt.subplots(figsize=(7.0, 0.35 * len(rows) + 1.0))
    try:
        names = [_short(name) for name, _, _ in rows][::-1]
        values = [100.0 * share for _, share, _ in rows][::-1]
        # Numeric positions: two operators whose shortened names agree keep two bars.
        bars = ax.barh(range(len(values)), values, color="#4c72b0")
        ax.set_yticks(range(len(values)), names)
        for bar, (_, _, label) in zip(bars, rows[::-1]):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, " " + label,
                    va="center", fontsize=8)
        ax.set_xlim(0, max(values + [1.0]) * 1.18)
        ax.tick_params(axis="y", labelsize=8)
        ax.tick_params(axis="x", labelsize=7)
        return _svg(fig, ax, title)
    finally:
        plt.close(fig)


def throughput_chart(steps: list[tuple[str, Any]], title: str) -> str:
    """Median samples/s per step, with the range of the timed windows as error bars."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 3.2))
    try:
        xs = range(len(steps))
        medians = [t.median for _, t in steps]
        low = [t.median - min(t.windows) for _, t in steps]
        high = [max(t.windows) - t.median for _, t in steps]
        ax.bar(xs, medians, color="#4c72b0", yerr=[low, high], capsize=4,
               error_kw={"ecolor": "#333", "elinewidth": 1})
        ax.set_xticks(list(xs), [f"{i + 1}. {_short(name, 28)}" for i, (name, _) in
                                 enumerate(steps)], fontsize=8)
        ax.set_ylabel("samples/s", fontsize=8)
        return _svg(fig, ax, title)
    finally:
        plt.close(fig)


# Colours of the memory categories, in MEMORY_CATEGORIES order.
_CATEGORY_COLOURS = ["#4c72b0", "#dd8452", "#8172b3", "#55a868", "#c44e52", "#937860",
                     "#da8bc3", "#8c8c8c"]


def memory_chart(memory: Any, names: dict[str, str], title: str, axis: str) -> str:
    """Live tensor memory over one step, stacked by category (MiB against ms)."""
    from ..model.run import MEMORY_CATEGORIES

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 3.4))
    try:
        present = [c for c in MEMORY_CATEGORIES if c in memory.timeline_b]
        ax.stackplot(memory.timeline_ms,
                     [[b / 2**20 for b in memory.timeline_b[c]] for c in present],
                     labels=[names.get(c, c) for c in present],
                     colors=[_CATEGORY_COLOURS[MEMORY_CATEGORIES.index(c)] for c in present],
                     step="post", linewidth=0)
        ax.set_xlabel("ms", fontsize=8)
        ax.set_ylabel(axis, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlim(memory.timeline_ms[0], memory.timeline_ms[-1])
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=7, frameon=False,
                  ncol=4)
        return _svg(fig, ax, title)
    finally:
        plt.close(fig)


_PHASE_COLOURS = {"data": "#c44e52", "input_copy": "#dd8452", "forward": "#4c72b0",
                  "loss": "#8172b3", "backward": "#55a868", "optimizer": "#da8bc3",
                  "drain": "#e8a0a0", "other": "#bbbbbb", "compute": "#4c72b0",
                  "communication": "#8172b3",
                  "copy_h2d": "#dd8452", "copy_d2h": "#937860", "copy_d2d": "#ccb974",
                  "memset": "#64b5cd", "idle_data": "#c44e52", "idle_sync": "#e8a0a0",
                  "idle_latency": "#cccccc", "idle_queued": "#bbbbbb",
                  "idle_host": "#dddddd"}


def breakdown_chart(breakdown: Any, names: dict[str, str], titles: dict[str, str],
                    step_word: str) -> str:
    """One stacked bar per profiled step (ms): host phases, and device activity on a GPU."""
    from ..analyze.breakdown import DEVICE_ACTIVITIES, HOST_PHASES

    plt = _pyplot()
    parts: list[tuple[str, Any, tuple[str, ...]]] = [("host", breakdown.host_us, HOST_PHASES)]
    if breakdown.device_us:
        parts.append(("device", breakdown.device_us, DEVICE_ACTIVITIES))
    n, labels, groups = _step_groups(len(breakdown.steps_us), step_word)
    fig, axes = plt.subplots(len(parts), 1, figsize=(7.0, 1.2 + len(parts) * (0.3 * n + 1.0)),
                             squeeze=False)
    try:
        for ax, (which, values, order) in zip(axes[:, 0], parts):
            left = [0.0] * n
            for key in order:
                row = [_mean(values.get(key) or [], g) / 1e3 for g in groups]
                if not any(row):
                    continue
                ax.barh(range(n), row, left=left, color=_PHASE_COLOURS.get(key, "#999"),
                        label=names.get(key, key), height=0.7)
                left = [a + b for a, b in zip(left, row)]
            ax.set_yticks(range(n), labels, fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel("ms", fontsize=8)
            ax.tick_params(axis="x", labelsize=7)
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35 - 0.02 * n), fontsize=7,
                      frameon=False, ncol=4)
            ax.set_title(titles[which], fontsize=9, loc="left")
            _frame(ax)
        return _svg_text(fig)
    finally:
        plt.close(fig)


# A chart of more steps than this draws the mean of consecutive steps per bar: a bar per
# step made the figure (and its memory) grow with the steps of a crafted run.
MAX_STEP_BARS = 40


def _step_groups(steps: int, step_word: str) -> tuple[int, list[str], list[range]]:
    """The bars of a chart of ``steps`` steps: how many, their labels, the steps of each."""
    if steps <= MAX_STEP_BARS:
        return steps, [f"{step_word} {i + 1}" for i in range(steps)], [range(i, i + 1)
                                                                       for i in range(steps)]
    bounds = [steps * k // MAX_STEP_BARS for k in range(MAX_STEP_BARS + 1)]
    groups = [range(a, b) for a, b in zip(bounds, bounds[1:])]
    return len(groups), [f"{step_word} {g.start + 1}\u2013{g.stop}" for g in groups], groups


def _mean(values: list[float], steps: range) -> float:
    picked = [values[i] for i in steps if i < len(values)]
    return sum(picked) / len(steps) if picked else 0.0


def roofline_chart(eff: Any, title: str, axes: dict[str, str]) -> str:
    """Log-log: arithmetic intensity (FLOP/byte) against achieved FLOP/s; the memory roof
    (bandwidth x intensity) and the compute roofs; operators as points sized by time."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    try:
        points = [o for o in eff.ops if o.flops > 0 and o.bytes > 0 and o.time_us > 0][:20]
        peaks, bandwidth = eff.peaks.flops, eff.peaks.bandwidth
        xs = [o.intensity for o in points]
        lo = min(xs + [bandwidth and min(peaks.values()) / bandwidth / 10]) / 2
        hi = max(xs + [max(peaks.values()) / bandwidth * 10]) * 2
        grid = [lo * (hi / lo) ** (i / 99) for i in range(100)]
        roofs: dict[float, list[str]] = {}  # dtypes of the same peak share one roof
        for key in sorted(peaks, key=peaks.get):
            roofs.setdefault(peaks[key], []).append(key)
        for peak, keys in roofs.items():
            ax.plot(grid, [min(peak, bandwidth * x) for x in grid], linewidth=1,
                    color="#888888" if "fp32" in keys else "#4c72b0", alpha=0.8)
            ax.annotate("/".join(keys), (hi, peak), fontsize=7, ha="right", va="bottom")
        longest = max((o.time_us for o in points), default=1.0)
        ax.scatter(xs, [o.achieved_flops for o in points],
                   s=[20 + 280 * o.time_us / longest for o in points],
                   c=["#c44e52" if o.bound == "memory" else "#55a868" for o in points],
                   alpha=0.6, edgecolors="none")
        for o in points[:6]:
            ax.annotate(_short(o.name, 24), (o.intensity, o.achieved_flops), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        # Math text is off (names are text), so the log axes label their decades
        # themselves: 10 with a superscript exponent.
        from matplotlib.ticker import FuncFormatter
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(_decade))
            axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_xlabel(axes["x"], fontsize=8)
        ax.set_ylabel(axes["y"], fontsize=8)
        ax.tick_params(labelsize=7)
        return _svg(fig, ax, title)
    finally:
        plt.close(fig)


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


def _svg(fig, ax, title: str) -> str:
    """Title, a light frame, and the figure as SVG text."""
    ax.set_title(_wrap_title(title), fontsize=10, loc="left")
    _frame(ax)
    return _svg_text(fig)


def _frame(ax) -> None:
    """A light frame: no top and right spines."""
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _svg_text(fig) -> str:
    """The figure as SVG text (no date: the same input gives the same file)."""
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


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
    from matplotlib import font_manager

    from .languages import all_fonts

    plt = _pyplot()
    installed = {f.name for f in font_manager.fontManager.ttflist}
    # The language's fonts first, then the other languages' (a name may be in any script).
    families = [f for f in all_fonts(view.lang) if f in installed] or ["DejaVu Sans"]
    # matplotlib's warnings (an empty legend, a layout it could not fit) are about a chart
    # that is still drawn; on stderr they would print reporter's own source paths.
    with plt.rc_context({"font.family": families}), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        files = _write_charts(view, Path(folder), terms, stem)
    return Charts(Path(folder), files, _mermaid(view, terms) if mermaid else {})


def _write_charts(view: View, folder: Path, terms: Any, stem: str
                  ) -> dict[tuple[int, str], str]:
    """The charts of ``view``, written into ``folder``; when drawing one fails or is
    interrupted, the ones it wrote are removed (those of an earlier report stay)."""
    written: dict[tuple[int, str], str] = {}
    before = ({p.name for p in folder.glob(f"{glob.escape(stem)}-chart-*")}
              if folder.is_dir() else set())
    try:
        _draw_each(view, folder, terms, stem, written)
    except BaseException:
        for name in set(written.values()) - before:
            (folder / name).unlink(missing_ok=True)
        raise
    return written


def _draw_each(view: View, folder: Path, terms: Any, stem: str,
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
                                                         terms.chart["throughput"]))
        return
    for i, s in enumerate(view.sections):
        rows = s.chart_rows
        if not rows:
            continue
        basis = "device" if s.has_device else "cpu"
        title = terms.chart["share"][basis]
        name = f"{stem}-chart-{i + 1}-{s.mode or 'profile'}.{view.lang}.svg"
        written[(i, "share")] = name
        write_atomic(folder / name, share_chart(rows, title))
    for i, s in enumerate(view.sections):
        if not s.breakdown_rows:
            continue
        name = f"{stem}-chart-steps-{i + 1}-{s.mode or 'profile'}.{view.lang}.svg"
        written[(i, "breakdown")] = name
        write_atomic(folder / name, breakdown_chart(
            s.breakdown_rows, {**terms.phase, **terms.activity}, terms.chart["steps"],
            terms.chart["step"]))
    for i, s in enumerate(view.sections):
        if not s.memory_rows:
            continue
        name = f"{stem}-chart-memory-{i + 1}-{s.mode or 'profile'}.{view.lang}.svg"
        written[(i, "memory")] = name
        write_atomic(folder / name, memory_chart(s.memory_rows, terms.category,
                                                 terms.chart["memory"], terms.chart["mib"]))
    for i, s in enumerate(view.sections):
        if not s.roofline_points:
            continue
        name = f"{stem}-chart-roofline-{i + 1}-{s.mode or 'profile'}.{view.lang}.svg"
        written[(i, "roofline")] = name
        write_atomic(folder / name, roofline_chart(s.roofline_points,
                                                   terms.chart["roofline"],
                                                   terms.chart["roofline_axes"]))


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
        title = terms.chart["share"][s.chart_basis].replace('"', "'")
        lines = [f"pie showData title {title}"]
        for name, share, _ in rows:
            lines.append(f'    "{mermaid_label(name)}" : {100 * share:.1f}')
        rest = 100 * (1 - sum(share for _, share, _ in rows))
        if rest >= 0.05:
            lines.append(f'    "{terms.chart["other"]}" : {rest:.1f}')
        out[i] = "\n".join(lines)
    return out
