"""Renderers: a view model in, a report out; one function writes the files.

Each output format is one entry in ``RENDERERS`` (name, file extension and a
render function returning text or bytes). Templates come from the language's folder
(``reporter.render.languages``); they only loop and print what ``reporter.render.view``
built.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, is_dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import WorkFailed
from ..analyze.breakdown import FULL_QUEUE
from ..model.profile import LATENCY_US
from ..store import write_atomic
from . import markup
# The options live in a light module (the command line reads them without Jinja or
# Babel); imported here too for whoever renders.
from .options import FORMATS, GITHUB_COMMENT_LIMIT, RenderOptions, parse_formats  # noqa: F401
from .charts import NO_CHARTS, Charts
from .languages import builtin_templates, language
from .sentences import each, say
from .view import CompareView, Fmt, ReportView, View


def template_cache() -> Any:
    """Where compiled templates are kept between processes, or None.

    Compiling a report's templates is most of what Jinja costs a fresh process (0.13 s
    of a cold PDF render on the development machine); reading them compiled takes a few
    milliseconds. Jinja checks each one against its source's checksum and the Python
    version, so an edited template or another interpreter compiles afresh. The folder
    is ``reporter.render.cache.folder("templates")``: where there is none, no cache, not
    an error, and so for a file in it that cannot be read or written."""
    import jinja2

    from .cache import folder

    where = folder("templates")
    if where is None:
        return None

    class Quiet(jinja2.FileSystemBytecodeCache):
        """A cache never stops a render: a damaged entry compiles afresh, a full disk
        keeps nothing."""

        def load_bytecode(self, bucket: Any) -> None:
            try:
                super().load_bytecode(bucket)
            except Exception:  # a damaged entry (its checksum is a pickle): compile afresh
                bucket.reset()

        def dump_bytecode(self, bucket: Any) -> None:
            try:
                super().dump_bytecode(bucket)
            except OSError:
                pass

    return Quiet(str(where))


@lru_cache(maxsize=None)
def _environment(folder: Path, lang: str):
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
        bytecode_cache=template_cache(),
    )
    env.filters.update(code=markup.code, fence=markup.fence, comment=markup.comment,
                       url=markup.url, join=markup.join)
    # a sentence the view's values choose, a sentence said of each item (render/sentences.py)
    env.globals.update(say=say, each=each)
    # thresholds the prose names, from the analysis' own constants (terms.j2 too)
    env.globals["limits"] = {"latency": Fmt(lang).whole_time(LATENCY_US),
                             "full_queue": Fmt(lang).int(FULL_QUEUE)}
    return env


def compile_templates() -> int:
    """Compile every language's templates into the cache (``template_cache``), as pip
    compiles Python's modules at install: scripts/setup.sh runs it, so that the first
    render on the machine reads them compiled. The number compiled; 0 without a cache."""
    from .languages import codes

    if template_cache() is None:
        return 0
    count = 0
    for lang in codes():
        env = environment(lang)
        for name in env.list_templates(filter_func=lambda n: n.endswith(".j2")):
            with template_errors(lang):
                env.get_template(name)
            count += 1
    return count


def environment(lang: str):
    """The Jinja environment of a language's templates (BadInput for an unknown one)."""
    return _environment(language(lang).folder, lang)


@contextmanager
def template_errors(lang: str) -> Iterator[None]:
    """A language folder's template that is missing, does not parse, or prints a value
    the report does not have: one line that names it (a folder added by a user, most
    likely), not a traceback."""
    import jinja2

    try:
        yield
    except jinja2.TemplateNotFound as exc:
        raise WorkFailed(f"the {lang} templates ({language(lang).folder}) have no {exc.name}: "
                         "copy it from templates/en/ and translate it", error_id="template"
                         ) from exc
    except jinja2.TemplateSyntaxError as exc:
        raise WorkFailed(f"a {lang} template does not parse: {exc.filename or exc.name}, "
                         f"line {exc.lineno}: {exc.message}", error_id="template") from exc
    except jinja2.TemplateError as exc:  # UndefinedError, among others
        raise WorkFailed(f"a {lang} template failed: {exc.message}", error_id="template"
                         ) from exc
    except UnicodeDecodeError as exc:  # a template file that is not UTF-8
        raise WorkFailed(f"a {lang} template ({language(lang).folder}) is not UTF-8: {exc}",
                         error_id="template") from exc
    except (ArithmeticError, RecursionError) as exc:  # {{ 1 // 0 }}, a macro calling itself
        raise WorkFailed(f"a {lang} template failed: {type(exc).__name__}: {exc}",
                         error_id="template") from exc


def terms(lang: str) -> Any:
    """The language's words for the values a report prints (terms.j2)."""
    with template_errors(lang):
        return environment(lang).get_template("terms.j2").module


DEFAULT_OPTIONS = RenderOptions()


def render_markdown(view: Any, options: RenderOptions = DEFAULT_OPTIONS,
                    charts: Charts = NO_CHARTS, template: str | None = None) -> str:
    """The Markdown report of a view (view.ReportView or CompareView; a mapping for a
    single template, with ``template``); with ``options.max_chars``, shortened to fit,
    the logs first."""
    text = _render_markdown(view, options, charts, template)
    limit = options.max_chars
    if not limit or len(text) <= limit or template or not isinstance(view, ReportView):
        return text
    # Shorten the folded logs first: fewer rows in each raw table, then none at all. The
    # caller's view stays whole.
    for keep in (15, 8, 4, 0):
        shorter = replace(view, sections=[
            replace(s, raw=s.raw_at(keep) if keep else [], logs_cut=True) if s.raw_at else s
            for s in view.sections])
        text = _render_markdown(shorter, options, charts, template)
        if len(text) <= limit:
            return text
    raise WorkFailed(f"the report is {len(text):,} characters even without its logs, over "
                     f"the limit of {limit:,} (--max-chars)", error_id="too-long")


def _render_markdown(view: Any, options: RenderOptions, charts: Charts,
                     template: str | None = None) -> str:
    context = dict(vars(view)) if is_dataclass(view) else dict(view)
    lang = context["lang"]
    template = template or ("compare.md.j2" if isinstance(view, CompareView) else "report.md.j2")
    with template_errors(lang):
        text = environment(lang).get_template(template).render(
            **context, charts=charts, github=options.github,
            max_chars_text=Fmt(lang).int(options.max_chars or 0))
    # Collapse runs of blank lines that template blocks leave behind.
    lines, blank = [], 0
    for line in text.splitlines():
        blank = blank + 1 if not line.strip() else 0
        if blank <= 1:
            lines.append(line.rstrip())
    return "\n".join(lines).strip() + "\n"


@dataclass(frozen=True)
class Renderer:
    """An output format: its name, file extension, and a function of the view, the
    options and the report's charts that returns the file's content."""

    name: str
    extension: str
    render: Callable[[View, RenderOptions, Charts], str | bytes]


def _render_pdf(view: View, options: RenderOptions, charts: Charts) -> bytes:
    """The handout: the Markdown report with room for whole logs and the charts as images
    (no character limit, no Mermaid: options for a comment do not apply to paper)."""
    from .pdf import render_pdf  # WeasyPrint only when a PDF is asked for

    images = replace(charts, mermaid={})
    return render_pdf(view, render_markdown(view, RenderOptions(), images), images)


RENDERERS: dict[str, Renderer] = {
    "md": Renderer("md", "md", render_markdown),
    "pdf": Renderer("pdf", "pdf", _render_pdf),
}


assert tuple(RENDERERS) == FORMATS, "render/options.py names every renderer"


def write_reports(view: View, folder: Path, formats: Sequence[str],
                  options: RenderOptions = DEFAULT_OPTIONS, stem: str = "report"
                  ) -> list[Path]:
    """Draw the report's charts into ``folder`` once, render the report in every format,
    then write the files: when a format fails, none is written, and the charts drawn for
    it are removed."""
    from .charts import draw

    language(view.lang)  # BadInput for an unknown language
    if "md" in formats and options.max_chars:
        # Charts only add lines: a report too long without them fails here, before they
        # are drawn (about a second a section) rather than after.
        render_markdown(view, options)
    folder = Path(folder)
    before = {p.name for p in folder.glob(f"{stem}-chart-*")} if folder.is_dir() else set()
    charts = draw(view, folder, terms(view.lang), stem, mermaid=options.github)
    written: list[Path] = []
    try:
        contents = [(RENDERERS[fmt], RENDERERS[fmt].render(view, options, charts))
                    for fmt in formats]
        for renderer, content in contents:
            path = folder / f"{stem}.{view.lang}.{renderer.extension}"
            fresh = not path.exists()  # one there before is replaced whole, and kept
            write_atomic(path, content)
            if fresh:
                written.append(path)
    except BaseException:  # an error or an interrupt: nothing of this call is left
        for path in written:
            path.unlink(missing_ok=True)
        for name in charts.names() - before:
            (folder / name).unlink(missing_ok=True)
        raise
    return [folder / f"{stem}.{view.lang}.{renderer.extension}" for renderer, _ in contents]


def write_report(view: View, folder: Path, fmt: str,
                 options: RenderOptions = DEFAULT_OPTIONS, stem: str = "report") -> Path:
    """write_reports in one format."""
    return write_reports(view, folder, [fmt], options, stem)[0]
