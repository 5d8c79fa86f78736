"""The PDF tables' column widths, worked out once so that WeasyPrint lays them out fixed.

WeasyPrint's automatic table layout measures every cell's text at each of its breaks to
find the columns' narrowest and widest widths, then lays the cells out again: of a
two-section report's 0.72-0.79 s of layout, 0.16-0.19 s (cpu-transformer in en, ru and
zh, 2026-11-27, the development machine).
Here each cell's text is measured once, by the advance widths of the fonts the style
sheet names (read with fontTools, which WeasyPrint itself uses to embed them, and kept
between processes: reporter.render.cache), and the
width is shared out by the rules WeasyPrint's automatic layout follows (CSS Tables 3,
width distribution); the table then carries the widths (``<col>``) and
``table-layout: fixed``. Where the fonts cannot be measured (no fontconfig, a font it
does not have and would substitute, a file fontTools cannot read), or a table is wider
than the page at its narrowest, the table is left to the automatic layout.

What it knows of the style sheet (reporter.render.pdf.CSS, whose sizes come from the
constants below): tables fill the body's width
(A4, 15 mm margins, the body's 8 px), cells are 7.5 pt with 1.5 mm of padding on either
side, headings bold, code (a code cell, a code span) in the code font at 0.92 em and
breakable anywhere, any cell but the first of a row on one line, and the first column
42% of the width at least. ``tests/test_pdf.py`` holds the widths to WeasyPrint's own.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import unicodedata
from functools import lru_cache
from typing import Callable

from . import cache

# The style sheet's sizes that the widths rest on: reporter.render.pdf.css() writes them
# into it from here, so that the two cannot disagree.
SIDE_MM = 15  # @page { margin: ... 15mm } left and right
LINE = 1.4  # html { line-height }
SIZE_PT = 7.5  # table { font-size }
CODE_EM = 0.92  # code { font-size }, and a code cell's
PAD_MM = 1.5  # th, td { padding: 1mm 1.5mm }
FIRST_SHARE = 0.42  # td:first-child { width: 42% }

PT_PER_MM = 72 / 25.4
# the body's width: A4 less the page's margins and the body's own (8 px, the user agent's
# style sheet)
WIDTH_PT = (210 - 2 * SIDE_MM) * PT_PER_MM - 2 * 6
PADDING_PT = 2 * PAD_MM * PT_PER_MM

_TABLE = re.compile(r"<table>(.*?)</table>", re.S)
_ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
_CELL = re.compile(r'<(th|td)(?: class="([^"]*)")?>(.*?)</\1>', re.S)
_CODE_SPAN = re.compile(r"<code>(.*?)</code>", re.S)
_TAG = re.compile(r"<[^>]*>")
_WIDE = "\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef"
# spaces but the no-break ones (Babel's numbers and units hold them), after a slash or a
# hyphen, around an ideograph
_BREAKS = re.compile(rf"[^\S\xa0\u2007\u202f]+|(?<=[/\-{_WIDE}])|(?=[{_WIDE}])")

Measure = Callable[[str], float]  # a text's width in em


MAX_UNITS = 0xFFFF  # a font's units per em and its advances are 16-bit (head, hmtx)
MAX_CODE = 0x10FFFF


def _kept(data: bytes | None) -> tuple[float, dict[int, int]] | None:
    """The units per em and advances of a cache entry, or None for anything but what
    ``_advances`` writes, each number in a font's range (a damaged or crafted entry: 10**400
    is valid JSON, and no float)."""
    if data is None:
        return None
    try:
        kept = json.loads(data)
    except (ValueError, RecursionError):  # not JSON (or not UTF-8), too deep, 5,000 digits
        return None
    if not isinstance(kept, dict):
        return None
    em, codes, advances = kept.get("em"), kept.get("codes"), kept.get("advances")
    if not (type(em) is int and 0 < em <= MAX_UNITS and type(codes) is list
            and type(advances) is list and len(codes) == len(advances)
            and all(type(c) is int and 0 <= c <= MAX_CODE for c in codes)
            and all(type(a) is int and 0 <= a <= MAX_UNITS for a in advances)):
        return None
    return float(em), dict(zip(codes, advances))


def _advances(path: str, index: int) -> tuple[float, dict[int, int]]:
    """The font's units per em and each character's advance in them, read with fontTools
    (about 10 ms a font), or from the cache (reporter.render.cache) where an earlier
    process kept them for this file, as it was (its size and time). A cache entry that is
    not what this writes is a miss: the font is read again."""
    st = os.stat(path)
    key = f"{path}|{index}|{st.st_size}|{st.st_mtime_ns}|1".encode()
    entry = f"{hashlib.sha1(key).hexdigest()}.json"
    kept = _kept(cache.read("fonts", entry))
    if kept is not None:
        return kept
    from fontTools.ttLib import TTFont

    font = TTFont(path, lazy=True, fontNumber=index)
    # glyphs by number: their names (the post table) are half of the reading, and unused
    font.setGlyphOrder([f"g{i}" for i in range(font["maxp"].numGlyphs)])
    cmap, metrics = font.getBestCmap(), font["hmtx"].metrics
    em = int(font["head"].unitsPerEm)
    advances = {code: int(metrics[glyph][0]) for code, glyph in cmap.items() if glyph in metrics}
    # kept where the cache can be trusted (a full disk, or none: read the font next time)
    cache.write("fonts", entry, json.dumps({"em": em, "codes": list(advances),
                                            "advances": list(advances.values())}).encode())
    return float(em), advances


def _measure(path: str, index: int) -> Measure:
    """The width in em of a text set in the font at ``path`` (its face ``index``)."""
    em, advances = _advances(path, index)
    widths: dict[str, float] = {}

    def width(text: str) -> float:
        total = 0.0
        for ch in text:
            w = widths.get(ch)
            if w is None:
                advance = advances.get(ord(ch))
                # a character the font lacks comes from the next font in the list: a
                # Chinese one, whose ideographs are an em wide
                w = widths[ch] = advance / em if advance is not None else (
                    1.0 if unicodedata.east_asian_width(ch) in "WF" else 0.6)
            total += w
        return total

    return width


@lru_cache(maxsize=None)
def fonts(family: str, code: str) -> tuple[Measure, Measure, Measure] | None:
    """How wide a text is in ``family``, in its bold and in the ``code`` family (the
    table's text, headings and code), or None when fontconfig does not have each of them
    itself (it would substitute another) or fontTools cannot read one."""
    if shutil.which("fc-match") is None:
        return None
    wanted = [(family, "regular"), (family, "bold"), (code, "regular")]
    asks: list[subprocess.Popen[str]] = []
    try:  # the three lookups at once: each is a process of a few milliseconds
        for name, style in wanted:
            asks.append(subprocess.Popen(["fc-match", "-f", "%{family}|%{index}|%{file}",
                                          f"{name}:{style}"], stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True))
        found = [ask.communicate(timeout=30)[0] for ask in asks]
        measures = []
        for (name, _), line in zip(wanted, found):
            families, index, path = line.rsplit("|", 2)
            if name not in families.split(","):
                return None
            measures.append(_measure(path, int(index or 0)))
    except Exception:  # no fontconfig answer, a file fontTools cannot read: WeasyPrint's
        return None    # own layout
    finally:
        for ask in asks:
            if ask.poll() is None:  # (a lookup that timed out)
                ask.kill()
                ask.wait()
    return measures[0], measures[1], measures[2]


def _cell(content: str, heading: bool, code_cell: bool, nowrap: bool,
          sans: Measure, bold: Measure, mono: Measure) -> tuple[float, float]:
    """A cell's narrowest and widest widths (points, padding included)."""
    widest, narrowest = 0.0, 0.0
    parts = _CODE_SPAN.split(content)  # text, code, text, code, ...
    for i, part in enumerate(parts):
        text = html.unescape(_TAG.sub("", part))
        if not text:
            continue
        code = code_cell or i % 2 == 1
        measure = mono if code else bold if heading else sans
        size = SIZE_PT * (CODE_EM if code else 1.0)
        widest += measure(text) * size
        # code breaks anywhere (overflow-wrap, word-break); text at spaces, after a slash
        # or a hyphen, and around an ideograph (Unicode's line breaking, as Pango's)
        pieces = list(text) if code else _BREAKS.split(text)
        narrowest = max([narrowest] + [measure(p) * size for p in pieces])
    if nowrap:
        narrowest = widest
    return narrowest + PADDING_PT, widest + PADDING_PT


def widths(rows: list[list[tuple[bool, str, str]]], sans: Measure, bold: Measure,
           mono: Measure, total: float = WIDTH_PT) -> list[float] | None:
    """The columns' widths in points (WeasyPrint's automatic layout, CSS Tables 3) of a
    table given as rows of (heading?, class, content HTML), or None for a table whose
    rows differ in length or which is wider than the page at its narrowest (the
    automatic layout, then)."""
    n = len(rows[0]) if rows else 0
    if not n or any(len(r) != n for r in rows):
        return None
    low, high = [0.0] * n, [0.0] * n
    share = [0.0] * n
    for row in rows:
        for i, (heading, classes, content) in enumerate(row):
            a, b = _cell(content, heading, "code" in classes.split(),
                         not heading and i > 0, sans, bold, mono)
            low[i], high[i] = max(low[i], a), max(high[i], b)
            if not heading and i == 0:
                share[i] = FIRST_SHARE
    if sum(low) > total:  # wider than the page at its narrowest: WeasyPrint's own layout
        return None
    percent = [max(share[i] * total, low[i]) if share[i] else low[i] for i in range(n)]
    guesses = [low, percent, percent,
               [percent[i] if share[i] else high[i] for i in range(n)]]
    if total < sum(guesses[-1]):
        lower = max((g for g in guesses if sum(g) <= total), key=sum)
        upper = min((g for g in guesses if sum(g) >= total), key=sum)
        added = [u - v for u, v in zip(upper, lower)]
        if sum(added) <= 0:
            return upper
        ratio = (total - sum(lower)) / sum(added)
        return [v + a * ratio for v, a in zip(lower, added)]
    out = guesses[-1][:]
    excess = total - sum(out)
    free = [i for i in range(n) if not share[i] and high[i] > 0]
    if free:  # to the columns without a percentage, by their widest width
        for i in free:
            out[i] += excess * high[i] / sum(high[j] for j in free)
    else:  # to the percentage columns, by their percentage
        for i in range(n):
            out[i] += excess * share[i] / sum(share)
    return out


def fix(body: str, family: str, code: str) -> str:
    """``body`` (the report's sanitized HTML) with each table's column widths given and
    its layout fixed; unchanged where the fonts cannot be measured. ``family``: the
    language's first font (the text's, Latin and Cyrillic included), ``code``: the code
    font."""
    measures = fonts(family, code)
    if measures is None:
        return body
    sans, bold, mono = measures

    def table(m: re.Match[str]) -> str:
        rows = [[(c[0] == "th", c[1], c[2]) for c in _CELL.findall(r)]
                for r in _ROW.findall(m.group(1))]
        cols = widths(rows, sans, bold, mono)
        if cols is None:
            return m.group(0)
        total = sum(cols)
        spec = "".join(f'<col style="width: {100 * w / total:.3f}%">' for w in cols)
        return f'<table class="fixed"><colgroup>{spec}</colgroup>{m.group(1)}</table>'

    return _TABLE.sub(table, body)
