"""The PDF handout: the Markdown report, laid out for print through HTML and WeasyPrint.

The PDF renderer wraps the Markdown one (the same words and numbers): Markdown
becomes HTML with python-markdown, the raw logs folded in ``<details>`` are
unfolded onto landscape pages, and one stylesheet lays it out on A4 with a
title block, page numbers and tables that fit. Fonts must cover the report's
script; when none does, rendering stops with one line that says what to
install, instead of printing boxes.
"""

from __future__ import annotations

import html
import logging
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from string import Template
from typing import Any
from urllib.parse import unquote, urlsplit

from .. import __version__
from ..errors import WorkFailed
from . import columns
from .charts import Charts
from .languages import all_fonts, language
from .view import View

CODE_FONT = "DejaVu Sans Mono"  # code's font (its width is measured: render/columns.py)
# The style sheet; the sizes the tables' widths are worked out from (render/columns.py)
# are that module's, filled in by css().
CSS = """
@page {
  size: A4; margin: 18mm ${side}mm 18mm ${side}mm;
  @top-left { content: string(doctitle); font-size: 7.5pt; color: #666; }
  @bottom-right { content: counter(page) " / " counter(pages); font-size: 8pt; color: #666; }
}
@page logs { size: A4 landscape; margin: 12mm 10mm 14mm 10mm; }
html { font-family: ${fonts}, sans-serif;
       font-size: 9.5pt; line-height: ${line}; color: #1a1a1a; }
h1 { string-set: doctitle content(); font-size: 17pt; margin: 0 0 3mm 0;
     border-bottom: 2px solid #4c72b0; padding-bottom: 2mm; }
h1 + p { font-size: 8.5pt; color: #444; margin-bottom: 6mm; }
h2 { font-size: 13pt; margin: 6mm 0 2mm 0; color: #24466e; }
h3 { font-size: 11pt; margin: 5mm 0 2mm 0; color: #24466e; }
h1, h2, h3 { break-after: avoid; }
p, li { orphans: 2; widows: 2; }
ul { padding-left: 5mm; }
li { margin-bottom: 1.5mm; }
code, pre, td.code { font-family: "${code_font}", "WenQuanYi Micro Hei Mono", monospace; }
code { font-size: ${code_em}em; background: #f2f4f7; padding: 0 0.5mm; overflow-wrap: anywhere; }
blockquote { margin: 2mm 0 3mm 0; padding: 1.5mm 3mm; border-left: 1.2mm solid #d9822b;
             background: #fdf3e7; }
blockquote p { margin: 0; }
table { width: 100%; border-collapse: collapse; margin: 2mm 0 4mm 0; font-size: ${table_pt}pt;
        break-inside: auto; }
table.fixed { table-layout: fixed; }  /* its widths given: reporter/render/columns.py */
thead { display: table-header-group; }
tr { break-inside: avoid; }
th, td { border-bottom: 0.5pt solid #ccd; padding: 1mm ${pad}mm; vertical-align: top; }
th { background: #e8edf5; text-align: left; }
td code { background: none; padding: 0; word-break: break-all; }
td.code { font-size: ${code_em}em; line-height: ${cell_line}pt; /* the table's, as with <code> */
          overflow-wrap: anywhere; word-break: break-all; }
.left { text-align: left; }
.right { text-align: right; }
.center { text-align: center; }
td:first-child { width: ${first}%; }
/* Numbers and units stay on one line ("145 GFLOP/s" broke at its slash); names wrap. */
td:not(:first-child) { white-space: nowrap; }
img { max-width: 100%; margin: 2mm 0 4mm 0; }
hr { border: none; border-top: 0.5pt solid #ccd; margin: 6mm 0 3mm 0; }
hr + p { font-size: 8pt; color: #555; }
.logs { page: logs; break-before: page; }
.logs h2, .logs h3 { margin-top: 0; }
.logs pre { font-size: 5.4pt; line-height: 1.25; white-space: pre-wrap; overflow-wrap: anywhere;
            background: #f7f8fa; padding: 2mm; border: 0.5pt solid #dde; }
.logs p { font-size: 8pt; margin: 2mm 0 1mm 0; }
"""

# The HTML a report's Markdown makes, and nothing else: tags outside this list are
# dropped (their text kept, escaped), attributes outside it are dropped, and an
# image must be one of the report's own chart files. No links, no <link>, no
# rel="attachment", no style sheets, no scripts: nothing from the input can make
# WeasyPrint fetch or embed anything.
_ALLOWED = {
    "h1": (), "h2": (), "h3": (), "h4": (), "h5": (), "h6": (), "p": (), "ul": (), "ol": (),
    "li": (), "table": (), "thead": (), "tbody": (), "tr": (), "th": ("style",),
    "td": ("style",), "code": ("class",), "pre": (), "strong": (), "em": (), "b": (), "i": (),
    "hr": (), "br": (), "blockquote": (), "div": ("class",), "img": ("src", "alt"),
    "details": (), "summary": (),
}
_VOID = {"hr", "br", "img"}
_ALIGN = re.compile(r"text-align: (left|right|center);")
_DROP_WITH_CONTENT = {"script", "style", "template", "svg", "math", "iframe", "object",
                      "title", "head", "textarea", "noscript"}
_ATTR_VALUE = {
    "style": _ALIGN,
    "class": re.compile(r"logs|language-[\w-]+"),
    "src": re.compile(r"[^:/?#\\]+-chart-[^:/?#\\]+\.svg"),  # a chart file beside the report
    "alt": re.compile(r".*", re.S),
}


class _Sanitizer(HTMLParser):
    """Rebuild HTML from the allowed tags and attributes only."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.dropping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROP_WITH_CONTENT:
            self.dropping += tag not in _VOID
            return
        if self.dropping or tag not in _ALLOWED:
            return
        kept = [(k, v or "") for k, v in attrs
                if k in _ALLOWED[tag] and _ATTR_VALUE[k].fullmatch(v or "")]
        # A cell's alignment as a class of the style sheet: WeasyPrint parses every style
        # attribute as a style sheet of its own (432 of them in a two-section report)
        kept = [("class", _ALIGN.sub(r"\1", v)) if k == "style" else (k, v) for k, v in kept]
        if tag == "img" and not any(k == "src" for k, _ in kept):
            return
        self.out.append(f"<{tag}" + "".join(f' {k}="{html.escape(v)}"' for k, v in kept) + ">")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROP_WITH_CONTENT:
            self.dropping = max(0, self.dropping - 1)
        elif not self.dropping and tag in _ALLOWED and tag not in _VOID:
            self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if not self.dropping:
            self.out.append(html.escape(data, quote=False))


def sanitize(body: str) -> str:
    """The HTML ``body`` with only the tags and attributes a report uses."""
    parser = _Sanitizer()
    try:
        parser.feed(body)
        parser.close()
    except AssertionError:  # html.parser before Python 3.13 asserts on "<![" + not a name
        return f"<pre>{html.escape(body)}</pre>"  # all of it as text: nothing can slip through
    return "".join(parser.out)


def url_fetcher(folder: Path, allowed: set[str]) -> Any:
    """A WeasyPrint URL fetcher that serves the report's own chart files and refuses
    everything else: no network, no other file, no data URL."""
    root = Path(folder).resolve()

    def local(url: str) -> bytes:
        parsed = urlsplit(url)
        if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
            path = Path(unquote(parsed.path)).resolve()
            if path.parent == root and path.name in allowed and path.is_file():
                return path.read_bytes()
        raise ValueError(f"reporter does not fetch {url[:200]!r} into a PDF")

    try:  # WeasyPrint 67 and later: a URLFetcher object
        from weasyprint.urls import URLFetcher, URLFetcherResponse
    except ImportError:  # earlier: a function that returns a dict
        return lambda url, *args, **kwargs: {"string": local(url), "mime_type": "image/svg+xml",
                                             "redirected_url": url}

    class ChartsOnly(URLFetcher):
        def fetch(self, url: str, headers: Any = None) -> Any:
            return URLFetcherResponse(url, local(url), {"Content-Type": "image/svg+xml"})

    return ChartsOnly(allowed_protocols=("file",), allow_redirects=False)


_DETAILS = re.compile(r"<details>\s*<summary><b>(.*?)</b></summary>\s*\n(.*?)\n</details>",
                      re.S)


_CODE = re.compile(r"<code>.*?</code>", re.S)
_CODE_CELL = re.compile(r'<td(?: class="(left|right|center)")?><code>([^<]*)</code></td>')


def _unfold(md_text: str) -> str:
    """Folded logs become a section of their own on landscape pages."""
    def block(m: re.Match) -> str:
        return f'<div class="logs" markdown="1">\n\n### {m.group(1)}\n\n{m.group(2)}\n\n</div>'
    return _DETAILS.sub(block, md_text)


def to_html(md_text: str, lang: str, created_iso: str | None) -> str:
    import markdown
    from markdown.extensions.fenced_code import FencedCodeExtension
    from markdown.extensions.md_in_html import MarkdownInHtmlExtension
    from markdown.extensions.sane_lists import SaneListExtension
    from markdown.extensions.tables import TableExtension

    # The extensions as objects, not names: a name is looked up among every installed
    # package's entry points, which costs a cold process more than the conversion.
    body = markdown.markdown(_unfold(md_text), output_format="html",
                             extensions=[TableExtension(), FencedCodeExtension(),
                                         SaneListExtension(), MarkdownInHtmlExtension()])
    # GitHub reads "\|" in a table cell's code span as "|"; python-markdown keeps the "\".
    body = sanitize(_CODE.sub(lambda m: m.group(0).replace("\\|", "|"), body))
    # A cell that is all code is a code cell: one box less to style and lay out (of 548
    # cells, 106 in a two-section report); it looks the same (td.code in the style sheet)
    body = _CODE_CELL.sub(lambda m: f'<td class="{" ".join(filter(None, ("code", m[1])))}">'
                                    f"{m[2]}</td>", body)
    body = columns.fix(body, all_fonts(lang)[0], CODE_FONT)  # the tables' widths, once
    h1 = re.search(r"<h1>(.*?)</h1>", body, re.S)
    title = html.unescape(re.sub(r"<[^>]*>", "", h1.group(1))) if h1 else "reporter"
    meta = [f'<meta name="generator" content="reporter {__version__}">']
    if created_iso:
        meta.append(f'<meta name="dcterms.created" content="{html.escape(created_iso)}">')
    return (f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title>{''.join(meta)}<style>{css(lang)}</style>"
            f"</head><body>{body}</body></html>")


def css(lang: str) -> str:
    """The stylesheet, its fonts those of the report's language first (languages.json)."""
    c = columns
    return Template(CSS).substitute(
        fonts=", ".join(f'"{f}"' for f in all_fonts(lang)), code_font=CODE_FONT,
        side=f"{c.SIDE_MM:g}", line=f"{c.LINE:g}", code_em=f"{c.CODE_EM:g}",
        table_pt=f"{c.SIZE_PT:g}", pad=f"{c.PAD_MM:g}", cell_line=f"{c.SIZE_PT * c.LINE:g}",
        first=f"{100 * c.FIRST_SHARE:g}")


def check_fonts(lang: str) -> None:
    """Stop with one clear line when no installed font covers the report's script."""
    lang_ = language(lang)
    code, package = lang_.fontconfig, lang_.font_package
    if shutil.which("fc-list") is None:
        raise WorkFailed("PDF needs fontconfig (fc-list) and fonts: apt-get install fontconfig "
                         f"{package.split(' ')[0]}, or run scripts/setup.sh", error_id="no-font")
    try:
        found = subprocess.run(["fc-list", f":lang={code}", "family"], capture_output=True,
                               text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    if not found:
        raise WorkFailed(f"no installed font covers the {lang} report's script; install "
                         f"{package} (apt-get install ...), then render again",
                         error_id="no-font")


def render_pdf(view: View, markdown_text: str, charts: Charts) -> bytes:
    """The PDF of a report: ``markdown_text`` is its Markdown (the caller renders it: this
    module does not depend on the renderer), ``charts`` (render.charts.Charts) the chart
    files it may embed."""
    check_fonts(view.lang)
    try:
        from weasyprint import HTML
    except (ImportError, OSError) as exc:  # OSError: Pango or its friends are missing
        raise WorkFailed(f"PDF needs WeasyPrint and Pango ({exc}); run scripts/setup.sh",
                         error_id="no-weasyprint") from exc
    page = to_html(markdown_text, view.lang, view.created_iso)
    folder = charts.folder or Path.cwd()
    # A refused URL is logged by WeasyPrint as a warning: not the user's business.
    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    return HTML(string=page, base_url=str(folder) + "/",
                url_fetcher=url_fetcher(folder, charts.names())).write_pdf()
