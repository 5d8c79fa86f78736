"""Renderers: a view model in, a report out; one function writes the files.

Each output format is one entry in ``RENDERERS`` (name, file extension and a
render function returning text or bytes). Templates come from the language's folder
(``reporter.render.languages``); they only loop and print what ``reporter.render.view``
built.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from ..errors import BadInput, WorkFailed
from ..store import write_atomic
from . import markup
from .languages import builtin_templates, language


@lru_cache(maxsize=None)
def _environment(folder: Path):
    import jinja2

    if not (folder / "report.md.j2").is_file():
        raise WorkFailed(f"reporter's installation is incomplete: no report.md.j2 in {folder} "
                         "(reinstall reporter, or complete that language folder)",
                         error_id="install")
    env = jinja2.Environment(
        # The language's words first, then the layout every language shares
        # (templates/layout/: the structure of each report, written once).
        loader=jinja2.FileSystemLoader([str(folder), str(builtin_templates())]),
        # Markdown, not HTML: every printed value goes through markup.finalize, which
        # escapes it as text unless the view or a filter made it Markdown (markup.Md).
        autoescape=False, finalize=markup.finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    env.filters.update(code=markup.code, fence=markup.fence, comment=markup.comment,
                       url=markup.url, join=markup.join)
    return env


def environment(lang: str):
    """The Jinja environment of a language's templates (BadInput for an unknown one)."""
    return _environment(language(lang).folder)


GITHUB_COMMENT_LIMIT = 65_536  # characters in a GitHub issue or pull-request comment


def render_markdown(view: dict[str, Any], template: str | None = None) -> str:
    """The Markdown report; with ``view['max_chars']``, shortened to fit (logs first)."""
    text = _render_markdown(view, template)
    limit = view.get("max_chars")
    if not limit or len(text) <= limit or template:
        return text
    # Shorten the folded logs first: fewer rows in each raw table, then none at all.
    sections = [dict(s) for s in view.get("sections") or []]  # the caller's view stays whole
    view = {**view, "sections": sections}
    for keep in (15, 8, 4, 0):
        for s in sections:
            if s.get("raw_at"):
                s["raw"] = s["raw_at"](keep) if keep else []
                s["logs_cut"] = True
        text = _render_markdown(view, template)
        if len(text) <= limit:
            return text
    raise WorkFailed(f"the report is {len(text):,} characters even without its logs, over "
                     f"the limit of {limit:,} (--max-chars)", error_id="too-long")


def _render_markdown(view: dict[str, Any], template: str | None = None) -> str:
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
    render: Callable[[dict[str, Any]], str | bytes]


def _render_pdf(view: dict[str, Any]) -> bytes:
    from .pdf import pdf_view, render_pdf  # WeasyPrint only when a PDF is asked for

    view = pdf_view(view)
    return render_pdf(view, render_markdown(view))


RENDERERS: dict[str, Renderer] = {
    "md": Renderer("md", "md", render_markdown),
    "pdf": Renderer("pdf", "pdf", _render_pdf),
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
    language(view["lang"])  # BadInput for an unknown language
    folder = Path(folder)
    if view.get("asset_dir") != (folder, stem):  # charts once per report, named after it
        from .charts import mermaid_charts, write_charts

        terms = environment(view["lang"]).get_template("terms.j2").module
        write_charts(view, folder, terms, stem)
        if view.get("github"):
            mermaid_charts(view, terms)
        view["asset_dir"] = (folder, stem)
    content = renderer.render(view)
    return write_atomic(folder / f"{stem}.{view['lang']}.{renderer.extension}", content)
