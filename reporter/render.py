"""Renderers: a view model in, a report out; one function writes the files.

Each output format is one entry in ``RENDERERS`` (name, file extension,
whether the output is binary, and a render function). Templates come from
``templates/<lang>/``; they only loop and print what ``reporter.view`` built.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from .errors import BadInput
from .store import write_atomic
from .view import LANGUAGES

TEMPLATES = Path(os.environ.get("REPORTER_TEMPLATES")
                 or Path(__file__).resolve().parent.parent / "templates")


@lru_cache(maxsize=None)
def environment(lang: str):
    import jinja2

    folder = TEMPLATES / lang
    if not folder.is_dir():
        raise BadInput(f"no templates for language {lang!r} in {TEMPLATES}",
                       error_id="bad-lang")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        autoescape=False,  # Markdown: the view model escapes what it puts in
        undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )


def render_markdown(view: dict[str, Any], template: str | None = None) -> str:
    template = template or ("compare.md.j2" if view.get("kind") == "compare" else "report.md.j2")
    text = environment(view["lang"]).get_template(template).render(**view)
    # Collapse runs of blank lines that template blocks leave behind.
    lines, blank = [], 0
    for line in text.splitlines():
        blank = blank + 1 if not line.strip() else 0
        if blank <= 1:
            lines.append(line.rstrip())
    return "\n".join(lines).strip() + "\n"


@dataclass(frozen=True)
class Renderer:
    name: str
    extension: str
    binary: bool
    render: Callable[[dict[str, Any]], str | bytes]


def _render_pdf(view: dict[str, Any]) -> bytes:
    from .pdf import render_pdf  # WeasyPrint only when a PDF is asked for

    return render_pdf(view)


RENDERERS: dict[str, Renderer] = {
    "md": Renderer("md", "md", False, render_markdown),
    "pdf": Renderer("pdf", "pdf", True, _render_pdf),
}


def parse_formats(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in RENDERERS]
    if unknown or not names:
        raise BadInput(f"unknown format {','.join(unknown) or text!r}; "
                       f"available: {', '.join(RENDERERS)}", error_id="bad-format")
    return list(dict.fromkeys(names))


def write_report(view: dict[str, Any], folder: Path, fmt: str, stem: str = "report") -> Path:
    """Render and write one report (and its charts, once); the file is whole or absent."""
    renderer = RENDERERS[fmt]
    if view["lang"] not in LANGUAGES:
        raise BadInput(f"unknown language {view['lang']!r}", error_id="bad-lang")
    folder = Path(folder)
    if view.get("asset_dir") != folder:
        from .charts import write_charts

        write_charts(view, folder, environment(view["lang"]).get_template("terms.j2").module)
        view["asset_dir"] = folder
    content = renderer.render(view)
    return write_atomic(folder / f"{stem}.{view['lang']}.{renderer.extension}", content)
