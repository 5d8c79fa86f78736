"""What a command line asks of the renderers: the output formats and their options.

Light on purpose: the command line and ``analyze --json`` read these without importing
the renderers (Jinja and Babel behind ``reporter.render.report``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadInput

GITHUB_COMMENT_LIMIT = 65_536  # characters in a GitHub issue or pull-request comment
FORMATS = ("md", "pdf")  # the names of reporter.render.report.RENDERERS, in its order


@dataclass(frozen=True)
class RenderOptions:
    """How a report is rendered, besides its view (which holds what it says)."""

    max_chars: int | None = None  # Markdown: shorten the folded logs to fit (None: no limit)
    github: bool = False  # Markdown: charts as Mermaid, which a GitHub comment draws


def parse_formats(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FORMATS]
    if unknown or not names:
        raise BadInput(f"unknown format {','.join(unknown) or text!r}; "
                       f"available: {', '.join(FORMATS)}", error_id="bad-format")
    return list(dict.fromkeys(names))
