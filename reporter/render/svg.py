"""A small SVG writer for the report's charts: bars, areas, lines, points, axes and text.

The charts are a handful of bars and lines; drawing them with matplotlib cost a cold
PDF 0.5-1.4 s of its 2-4 s (its import, its text layout, then WeasyPrint parsing its
verbose SVG: bench/render.py). Here a chart is a few dozen elements written directly.
Lengths are points (1/72 in), as the PDF's; text widths are estimated from the
characters (a wide East Asian character is 1 em, others at most 0.6 em), so that a label
never runs into what is beside it whatever font the viewer picks.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Iterable, Sequence

# Characters XML 1.0 does not allow (a name may hold any of them): dropped.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})


def esc(text: str) -> str:
    """Text for an SVG element or attribute."""
    return _NOT_XML.sub("", str(text)).translate(_ESCAPES)


def text_width(text: str, size: float) -> float:
    """An upper estimate of the width of ``text`` at ``size`` points."""
    return size * sum(1.0 if unicodedata.east_asian_width(ch) in "WF" else 0.6
                      for ch in text)


def _n(value: float) -> str:
    """A coordinate, short."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


class Canvas:
    """An SVG document of ``width`` x ``height`` points, its text in ``fonts``."""

    def __init__(self, width: float, height: float, fonts: Sequence[str]):
        self.width, self.height = width, height
        self.fonts = fonts
        self.parts: list[str] = []

    def rect(self, x: float, y: float, w: float, h: float, fill: str) -> None:
        if w > 0 and h > 0:
            self.parts.append(f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(w)}" '
                              f'height="{_n(h)}" fill="{fill}"/>')

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = "#000",
             width: float = 0.8) -> None:
        self.parts.append(f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" '
                          f'stroke="{stroke}" stroke-width="{_n(width)}"/>')

    def polyline(self, points: Iterable[tuple[float, float]], stroke: str,
                 width: float = 1.0, opacity: float = 1.0) -> None:
        d = " ".join(f"{_n(x)},{_n(y)}" for x, y in points)
        self.parts.append(f'<polyline points="{d}" fill="none" stroke="{stroke}" '
                          f'stroke-width="{_n(width)}" stroke-opacity="{_n(opacity)}"/>')

    def polygon(self, points: Iterable[tuple[float, float]], fill: str) -> None:
        d = " ".join(f"{_n(x)},{_n(y)}" for x, y in straight(points))
        self.parts.append(f'<polygon points="{d}" fill="{fill}"/>')

    def circle(self, x: float, y: float, r: float, fill: str, opacity: float) -> None:
        self.parts.append(f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{_n(r)}" fill="{fill}" '
                          f'fill-opacity="{_n(opacity)}"/>')

    def text(self, x: float, y: float, text: str, size: float = 8.0, anchor: str = "start",
             middle: bool = True, rotate: float = 0.0) -> None:
        """Text at (x, y): its vertical middle there (else its baseline)."""
        if not text:
            return
        extra = f' dy="{_n(0.35 * size)}"' if middle else ""
        turn = f' transform="rotate({_n(rotate)} {_n(x)} {_n(y)})"' if rotate else ""
        self.parts.append(f'<text x="{_n(x)}" y="{_n(y)}"{extra} font-size="{_n(size)}" '
                          f'text-anchor="{anchor}"{turn}>{esc(text)}</text>')

    def svg(self) -> str:
        families = ", ".join(f"'{esc(f)}'" for f in self.fonts if "'" not in f)
        style = f"text {{ font-family: {families + ', ' if families else ''}sans-serif; " \
                "fill: #222 }"
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(self.width)}pt" '
                f'height="{_n(self.height)}pt" viewBox="0 0 {_n(self.width)} '
                f'{_n(self.height)}">\n<style>{style}</style>\n'
                f'<rect width="100%" height="100%" fill="#fff"/>\n'
                + "\n".join(self.parts) + "\n</svg>\n")


def straight(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The corners of a path: a point on a horizontal or vertical line between its
    neighbours (a step line's flat runs, at the canvas' precision) is left out. Drawing
    each point cost WeasyPrint about 20 us; a step's memory timeline has thousands."""
    out: list[tuple[float, float]] = []
    for x, y in points:
        x, y = round(x, 2), round(y, 2)
        if out and out[-1] == (x, y):
            continue
        if len(out) >= 2:
            (ax, ay), (bx, by) = out[-2], out[-1]
            if (ay == by == y and min(ax, x) <= bx <= max(ax, x)) or \
                    (ax == bx == x and min(ay, y) <= by <= max(ay, y)):
                out[-1] = (x, y)
                continue
        out.append((x, y))
    return out


def ticks(lo: float, hi: float, most: int = 7) -> list[float]:
    """Round values from ``lo`` to ``hi`` at a step of 1, 2, 2.5 or 5 times a power of
    ten, at most ``most`` of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(1, most - 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    out = []
    k = first
    while k * step <= hi * (1 + 1e-9) + 1e-12:
        out.append(k * step)
        k += 1
    return out


def tick_label(value: float, values: Sequence[float]) -> str:
    """A tick's number with as many decimals as its axis' step needs."""
    step = abs(values[1] - values[0]) if len(values) > 1 else abs(value) or 1.0
    decimals = 0
    while decimals < 6 and abs(round(step, decimals) - step) > step * 1e-6:
        decimals += 1
    return f"{value:.{decimals}f}"


class Axes:
    """A plot area (x0, y0) to (x1, y1) in the canvas, with linear or log scales."""

    def __init__(self, canvas: Canvas, box: tuple[float, float, float, float],
                 xlim: tuple[float, float], ylim: tuple[float, float],
                 xlog: bool = False, ylog: bool = False):
        self.c = canvas
        self.x0, self.y0, self.x1, self.y1 = box
        self.xlog, self.ylog = xlog, ylog
        # Limits in axis units: log10 of the values on a log scale.
        self.xlim: tuple[float, float] = ((math.log10(xlim[0]), math.log10(xlim[1])) if xlog
                                          else xlim)
        self.ylim: tuple[float, float] = ((math.log10(ylim[0]), math.log10(ylim[1])) if ylog
                                          else ylim)

    def x(self, value: float) -> float:
        v = math.log10(value) if self.xlog else value
        lo, hi = self.xlim
        return self.x0 + (self.x1 - self.x0) * ((v - lo) / (hi - lo) if hi > lo else 0.0)

    def y(self, value: float) -> float:
        v = math.log10(value) if self.ylog else value
        lo, hi = self.ylim
        return self.y1 - (self.y1 - self.y0) * ((v - lo) / (hi - lo) if hi > lo else 0.0)

    def frame(self) -> None:
        """The left and bottom spines (no top or right one)."""
        self.c.line(self.x0, self.y0, self.x0, self.y1)
        self.c.line(self.x0, self.y1, self.x1, self.y1)

    def xticks(self, values: Sequence[float], labels: Sequence[str], size: float = 7.0
               ) -> None:
        for v, label in zip(values, labels):
            x = self.x(v)
            self.c.line(x, self.y1, x, self.y1 + 3)
            self.c.text(x, self.y1 + 4 + size * 0.6, label, size, anchor="middle")

    def yticks(self, values: Sequence[float], labels: Sequence[str], size: float = 7.0
               ) -> None:
        for v, label in zip(values, labels):
            y = self.y(v)
            self.c.line(self.x0 - 3, y, self.x0, y)
            self.c.text(self.x0 - 5, y, label, size, anchor="end")

    def linear_xticks(self, size: float = 7.0) -> float:
        """Round ticks on a linear x axis; the height they take below it."""
        values = ticks(self.xlim[0], self.xlim[1])
        self.xticks(values, [tick_label(v, values) for v in values], size)
        return 4 + size * 1.2

    def linear_yticks(self, size: float = 7.0) -> None:
        values = ticks(self.ylim[0], self.ylim[1])
        self.yticks(values, [tick_label(v, values) for v in values], size)


def _legend_columns(width: float, names: Sequence[str], columns: int, size: float
                    ) -> tuple[int, float]:
    """How many columns of names a legend lays out on a canvas ``width`` wide (at most
    ``columns``, fewer where the longest name leaves no room), and a column's width."""
    column = max(text_width(name, size) for name in names) + size * 2.5
    return max(1, min(columns, len(names), int((width - 20) // column))), column


def legend_rows(width: float, names: Sequence[str], columns: int = 4,
                size: float = 7.0) -> int:
    """The rows ``legend`` takes for these names: what a chart leaves room for."""
    if not names:
        return 0
    return -(-len(names) // _legend_columns(width, names, columns, size)[0])


def legend(canvas: Canvas, top: float, items: Sequence[tuple[str, str]], columns: int = 4,
           size: float = 7.0) -> float:
    """Colour keys and names in rows of at most ``columns``, centred on the canvas
    from ``top``; the y below them."""
    if not items:
        return top
    columns, column = _legend_columns(canvas.width, [name for name, _ in items], columns,
                                      size)
    left = (canvas.width - columns * column) / 2
    y = top
    for i, (name, colour) in enumerate(items):
        row, col = divmod(i, columns)
        y = top + row * size * 1.6
        x = left + col * column
        canvas.rect(x, y - size * 0.4, size * 1.4, size * 0.8, colour)
        canvas.text(x + size * 1.9, y, name, size)
    return y + size


def wrapped(canvas: Canvas, x: float, y: float, lines: Sequence[str], size: float) -> float:
    """A title of one or more lines from (x, y) down; the y below it."""
    for line in lines:
        y += size * 1.25
        canvas.text(x, y, line, size, middle=False)
    return y + size * 0.5
