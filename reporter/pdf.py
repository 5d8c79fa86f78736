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
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from . import __version__
from .errors import WorkFailed

# fontconfig language code per report language, and the Debian package that covers it.
FONT_LANG = {"en": ("en", "fonts-dejavu-core"), "ru": ("ru", "fonts-dejavu-core"),
             "zh": ("zh-cn", "fonts-wqy-microhei (or fonts-noto-cjk)")}

CSS = """
@page {
  size: A4; margin: 18mm 15mm 18mm 15mm;
  @top-left { content: string(doctitle); font-size: 7.5pt; color: #666; }
  @bottom-right { content: counter(page) " / " counter(pages); font-size: 8pt; color: #666; }
}
@page logs { size: A4 landscape; margin: 12mm 10mm 14mm 10mm; }
html { font-family: "DejaVu Sans", "WenQuanYi Micro Hei", "Noto Sans CJK SC", sans-serif;
       font-size: 9.5pt; line-height: 1.4; color: #1a1a1a; }
h1 { string-set: doctitle content(); font-size: 17pt; margin: 0 0 3mm 0;
     border-bottom: 2px solid #4c72b0; padding-bottom: 2mm; }
h1 + p { font-size: 8.5pt; color: #444; margin-bottom: 6mm; }
h2 { font-size: 13pt; margin: 6mm 0 2mm 0; color: #24466e; }
h3 { font-size: 11pt; margin: 5mm 0 2mm 0; color: #24466e; }
h1, h2, h3 { break-after: avoid; }
p, li { orphans: 2; widows: 2; }
ul { padding-left: 5mm; }
li { margin-bottom: 1.5mm; }
code, pre { font-family: "DejaVu Sans Mono", "WenQuanYi Micro Hei Mono", monospace; }
code { font-size: 0.92em; background: #f2f4f7; padding: 0 0.5mm; overflow-wrap: anywhere; }
table { width: 100%; border-collapse: collapse; margin: 2mm 0 4mm 0; font-size: 7.5pt;
        break-inside: auto; }
thead { display: table-header-group; }
tr { break-inside: avoid; }
th, td { border-bottom: 0.5pt solid #ccd; padding: 1mm 1.5mm; vertical-align: top; }
th { background: #e8edf5; text-align: left; }
td code { background: none; padding: 0; word-break: break-all; }
td:first-child { width: 42%; }
img { max-width: 100%; margin: 2mm 0 4mm 0; }
hr { border: none; border-top: 0.5pt solid #ccd; margin: 6mm 0 3mm 0; }
hr + p { font-size: 8pt; color: #555; }
.logs { page: logs; break-before: page; }
.logs h2, .logs h3 { margin-top: 0; }
.logs pre { font-size: 5.4pt; line-height: 1.25; white-space: pre-wrap; overflow-wrap: anywhere;
            background: #f7f8fa; padding: 2mm; border: 0.5pt solid #dde; }
.logs p { font-size: 8pt; margin: 2mm 0 1mm 0; }
"""

_DETAILS = re.compile(r"<details>\s*<summary><b>(.*?)</b></summary>\s*\n(.*?)\n</details>",
                      re.S)


_CODE = re.compile(r"<code>.*?</code>", re.S)


def _unfold(md_text: str) -> str:
    """Folded logs become a section of their own on landscape pages."""
    def block(m: re.Match) -> str:
        return f'<div class="logs" markdown="1">\n\n### {m.group(1)}\n\n{m.group(2)}\n\n</div>'
    return _DETAILS.sub(block, md_text)


def to_html(md_text: str, lang: str, created_iso: str | None) -> str:
    import markdown

    body = markdown.markdown(_unfold(md_text), output_format="html",
                             extensions=["tables", "fenced_code", "sane_lists", "md_in_html"])
    # GitHub reads "\|" in a table cell's code span as "|"; python-markdown keeps the "\".
    body = _CODE.sub(lambda m: m.group(0).replace("\\|", "|"), body)
    title = next((line[2:].strip() for line in md_text.splitlines() if line.startswith("# ")),
                 "reporter")
    title = re.sub(r"`([^`]*)`", r"\1", title)
    meta = [f'<meta name="generator" content="reporter {__version__}">']
    if created_iso:
        meta.append(f'<meta name="dcterms.created" content="{html.escape(created_iso)}">')
    return (f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title>{''.join(meta)}<style>{CSS}</style>"
            f"</head><body>{body}</body></html>")


def check_fonts(lang: str) -> None:
    """Stop with one clear line when no installed font covers the report's script."""
    code, package = FONT_LANG[lang]
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


def render_pdf(view: dict[str, Any]) -> bytes:
    """The PDF of a report view (charts are read from ``view['asset_dir']``)."""
    from .render import render_markdown

    check_fonts(view["lang"])
    try:
        from weasyprint import HTML
    except (ImportError, OSError) as exc:  # OSError: Pango or its friends are missing
        raise WorkFailed(f"PDF needs WeasyPrint and Pango ({exc}); run scripts/setup.sh",
                         error_id="no-weasyprint") from exc
    # The handout has its own charts and room for whole logs: no Mermaid, no character limit.
    parts = "modes" if view.get("kind") == "compare" else "sections"
    view = {**view, "max_chars": None, parts: [{**p, "mermaid": None} for p in view[parts]]}
    page = to_html(render_markdown(view), view["lang"], view.get("created_iso"))
    base = str(view.get("asset_dir") or Path.cwd())
    return HTML(string=page, base_url=base).write_pdf()
