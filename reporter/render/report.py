"""Renderers: a view model in, a report out; one function writes the files.

Each output format is one entry in ``RENDERERS`` (name, file extension and a
render function returning text or bytes). Templates come from the language's folder
(``reporter.render.languages``); they only loop and print what ``reporter.render.view``
built.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from contextlib import contextmanager, suppress
from dataclasses import dataclass, is_dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence
from urllib.parse import unquote

from ..errors import WorkFailed, signals_deferred, work_begins
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
    milliseconds. Each entry is checked against its source's checksum and the Python
    version, so an edited template or another interpreter compiles afresh. The folder
    is ``reporter.render.cache.folder("templates")``: where there is none, no cache, not
    an error, and so for an entry that cannot be trusted or read (reporter.render.cache
    checks the folder's path and the entry at each open: what it holds is code)."""
    import marshal
    import pickle
    import types

    import jinja2
    from jinja2.bccache import bc_magic

    from . import cache

    if cache.folder("templates") is None:
        return None

    class Checked(jinja2.BytecodeCache):
        """Entries read and written through reporter.render.cache; the checksum compared
        as bytes (Jinja's own reading unpickles it first). A cache never stops a render: a
        damaged entry compiles afresh, a full disk keeps nothing."""

        def load_bytecode(self, bucket: Any) -> None:
            data = cache.read("templates", f"__jinja2_{bucket.key}.cache")
            head = bc_magic + pickle.dumps(bucket.checksum, 2)
            if data is None or not data.startswith(head):
                return  # not kept, not to be trusted, or stale: compile afresh
            try:
                code = marshal.loads(data[len(head):])
            except (EOFError, ValueError, TypeError):  # a damaged entry
                return
            if isinstance(code, types.CodeType):
                bucket.code = code

        def dump_bytecode(self, bucket: Any) -> None:
            cache.write("templates", f"__jinja2_{bucket.key}.cache",
                        bucket.bytecode_to_string())

    return Checked()


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
                       url=markup.url, join=markup.join, with_code=markup.with_code,
                       cap_first=markup.cap_first)
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
    # {{ 1 // 0 }}, a macro calling itself, {{ 1 + 'a' }}, {{ "{:d}".format("a") }}
    except (ArithmeticError, RecursionError, TypeError, ValueError, LookupError) as exc:
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
    """Draw the report's charts and render it in every format, then publish the set into
    ``folder``: the report appears with its charts (and PDF) or not at all.

    Everything is written first into a hidden scratch folder inside ``folder``, so that a
    failure or an interrupt while drawing or rendering leaves ``folder`` as it was (an
    earlier report of the same name included). Then ``_publish`` renames the files into
    place with SIGINT and SIGTERM held back, undoing the renames done if one fails."""
    from .charts import draw

    language(view.lang)  # BadInput for an unknown language
    if "md" in formats and options.max_chars:
        # Charts only add lines: a report too long without them fails here, before they
        # are drawn (about a second a section) rather than after.
        render_markdown(view, options)
    folder = Path(folder)
    names = [f"{stem}.{view.lang}.{RENDERERS[fmt].extension}" for fmt in formats]
    md = f"{stem}.{view.lang}.md"
    work_begins()
    folder.mkdir(parents=True, exist_ok=True)
    with _scratch(folder) as scratch:
        charts = draw(view, scratch, terms(view.lang), stem, mermaid=options.github)
        for fmt, name in zip(formats, names):
            write_atomic(scratch / name, RENDERERS[fmt].render(view, options, charts))
        # An earlier Markdown's charts that the new one does not show: removed once it is
        # replaced (where it is not replaced, it still shows them).
        stale = (_charts_linked(folder / md, stem, view.lang) - charts.names()
                 if md in names else set())
        # Charts first, then the Markdown, then the PDF: wherever the process stops, even
        # by SIGKILL, each Markdown's links resolve and no PDF stands without its Markdown.
        _publish(scratch, folder, sorted(charts.names()) + [n for n in names if n == md]
                 + [n for n in names if n != md], stale)
    return [folder / name for name in names]


@contextmanager
def _scratch(folder: Path) -> Iterator[Path]:
    """A hidden folder inside ``folder`` (one file system: a rename out of it is atomic),
    removed with whatever is left in it. Its name is chosen before it exists, so that an
    interrupt at any point leaves nothing (as with store.write_atomic's temp file)."""
    path = folder / f".render-{secrets.token_hex(6)}.tmp"
    ours = True
    try:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            ours = False  # another's (48 random bits): not ours to remove
            raise
        yield path
    finally:
        if ours:
            with signals_deferred():
                shutil.rmtree(path, ignore_errors=True)


def _charts_linked(md: Path, stem: str, lang: str) -> set[str]:
    """The chart files of this report (``<stem>-chart-...<lang>.svg``) that the Markdown
    ``md`` links to; none when there is no such file or it cannot be read. Read from the
    links, not found by a glob: a file name is no pattern (``x[1].txt``), and the charts of
    another report whose name starts as this one's does are not this one's."""
    try:
        text = md.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    out = set()
    for target in re.findall(r"\]\(([^()\s]+)\)", text):
        name = unquote(target)
        if (name.startswith(f"{stem}-chart-") and name.endswith(f".{lang}.svg")
                and "/" not in name and "\\" not in name):
            out.add(name)
    return out


def _publish(scratch: Path, folder: Path, names: Sequence[str], stale: set[str]) -> None:
    """Rename ``names`` from ``scratch`` into ``folder``, in that order, then remove the
    ``stale`` files there: all of it or, when a rename fails, none (the files replaced are
    put back from hard links made first, those new to the folder removed). SIGINT and
    SIGTERM wait until it is done (errors.signals_deferred): an interrupt then finds the
    whole new set in place, and the line it prints ("nothing half-written was kept") true."""
    with signals_deferred():
        before = scratch / "before"  # no report file has that name (each has a language)
        os.mkdir(before, 0o700)
        backups: dict[str, Path] = {}
        for name in names:  # before anything is renamed: a failure here changes nothing
            if os.path.lexists(folder / name):
                backups[name] = before / name
                try:
                    os.link(folder / name, before / name, follow_symlinks=False)
                except OSError:  # a file system without hard links
                    shutil.copy2(folder / name, before / name, follow_symlinks=False)
        done: list[str] = []
        try:
            for name in names:
                done.append(name)  # before the rename: undoing one not done is harmless
                os.replace(scratch / name, folder / name)
        except BaseException:
            for name in reversed(done):
                with suppress(OSError):
                    if name in backups:
                        os.replace(backups[name], folder / name)
                    else:
                        os.unlink(folder / name)
            raise
        for name in stale:
            with suppress(OSError):
                os.unlink(folder / name)


def write_report(view: View, folder: Path, fmt: str,
                 options: RenderOptions = DEFAULT_OPTIONS, stem: str = "report") -> Path:
    """write_reports in one format."""
    return write_reports(view, folder, [fmt], options, stem)[0]
