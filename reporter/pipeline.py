"""The work behind each command, one function per command, usable from Python.

``run_targets`` is the whole pipeline of a live run: profile each target (with the other
ranks, in a distributed run), analyze it, render its reports into a staging folder and
commit the folder into ``runs/`` only once everything in it is written. The other
functions re-render, analyze and compare what is already stored or recorded. The command
line (``reporter.cli``) parses arguments and calls one of them.
"""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .errors import BadInput, ReporterError, WorkFailed, work_begins
from .model.profile import Profile
from .model.run import Run, Section
# Not the renderers (Jinja, Babel, WeasyPrint): they load in the functions that render, so
# `reporter --help`, `--version`, `list` and `analyze --json` start without them.
from .render.options import GITHUB_COMMENT_LIMIT, RenderOptions, parse_formats

if TYPE_CHECKING:
    from .collect.distributed import Peers, World
    from .render.view import ReportView, View

Say = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Output:
    """What shapes the written reports, and who hears of each file written."""

    lang: str
    formats: tuple[str, ...] = ("md",)
    max_chars: int | None = GITHUB_COMMENT_LIMIT  # None: no limit
    github: bool = False  # Mermaid charts, for a pull request or a job summary
    published: Callable[[Path], None] = field(default=lambda path: None)

    @classmethod
    def parse(cls, lang: str, formats: str, max_chars: int, github: bool,
              published: Callable[[Path], None]) -> Output:
        """Check the options as a user typed them (BadInput when wrong)."""
        from .render.languages import language

        if max_chars < 0:
            raise BadInput("--max-chars must be 0 (no limit) or more", error_id="usage")
        return cls(language(lang).code, tuple(parse_formats(formats)), max_chars or None,
                   github, published)

    @property
    def options(self) -> RenderOptions:
        return RenderOptions(max_chars=self.max_chars, github=self.github)

    def write(self, view: View, folder: Path, stem: str = "report",
              publish: bool = True) -> list[Path]:
        """The view in each format, written into ``folder``; each file published."""
        from .render.report import write_reports

        paths = write_reports(view, folder, self.formats, self.options, stem)
        if publish:
            for path in paths:
                self.published(path)
        return paths


@dataclass(frozen=True)
class RunRequest:
    """What ``reporter run`` profiles, and how."""

    specs: tuple[str, ...]  # built-in names, module:function or file.py:function
    device: str = "auto"  # auto, cuda or cpu
    preset: str | None = None  # None: large on a GPU of 40 GiB or more, else default
    time_budget_s: float = 1.5
    rank_timeout_s: float = 300.0
    compare: bool = False  # also compare the runs in order, the first as the base
    threads: int | None = None  # torch's intra-op threads for the run (None: torch's own)


def check_run_request(request: RunRequest) -> list[tuple[str, Callable[..., Any]]]:
    """The builders of the request's targets; bad specs and options fail before any work."""
    from .collect.target import resolve

    builders = [resolve(spec) for spec in request.specs]
    if not 0 < request.time_budget_s <= 3600:
        raise BadInput("--time-budget takes seconds, more than 0 and at most 3600",
                       error_id="usage")
    if not 0 < request.rank_timeout_s <= 86_400:  # false for nan
        raise BadInput("--rank-timeout takes seconds, more than 0 and at most 86,400",
                       error_id="usage")
    if request.threads is not None and not 1 <= request.threads <= 1024:
        raise BadInput("--threads takes a number of threads from 1 to 1024", error_id="usage")
    return builders


def run_targets(request: RunRequest, root: Path, output: Output,
                progress: Say = _stderr, warn: Say = _stderr) -> int:
    """Profile, analyze and report each target; store each run under ``root``. Returns the
    exit code: 0, or 1 when a target failed (the others are still stored)."""
    from .collect import distributed
    from .collect.runner import RunOptions, default_preset, resolve_device  # imports torch

    builders = check_run_request(request)
    world = distributed.world_from_env()
    device = resolve_device(request.device)
    opts = RunOptions(device=device, preset=default_preset(device, request.preset),
                      time_budget_s=request.time_budget_s, threads=request.threads)
    if world is None:
        return _run_targets(request, builders, opts, root, output, progress, warn)
    # A rank's session makes sockets, a store and the other ranks' scratch folders (this
    # rank stages no run): from here an interrupt raises, and they are cleaned up.
    work_begins()
    with distributed.session(world, opts.device, request.rank_timeout_s) as (device, peers):
        opts = replace(opts, device=device)
        if world.rank != 0:  # profile each target, post it to rank 0, write nothing
            from .collect.runner import profile_target

            for i, (spec, (_, builder)) in enumerate(zip(request.specs, builders), 1):
                distributed.profile_on_ranks(profile_target, world, peers, i, spec, builder,
                                             opts)
            return 0
        return _run_targets(request, builders, opts, root, output, progress, warn,
                            (world, peers))


def _run_targets(request: RunRequest, builders, opts, root: Path, output: Output,
                 progress: Say, warn: Say,
                 ranks: tuple[World, Peers] | None = None) -> int:
    """Each target profiled (on every rank, gathered here, when ``ranks`` holds the world
    and its peers), analyzed, reported and stored."""
    from .collect import distributed
    from .collect.runner import device_broken, profile_target
    from .store import commit, pack_traces, reserve, staging

    world = ranks[0] if ranks is not None else None
    remove_stale(root, warn)
    specs = request.specs
    progress(f"profiling {len(specs)} target(s) on {opts.device}, preset {opts.preset}"
             + (f", {world.size} ranks" if world else ""))
    failed = 0
    done = []
    for i, (spec, (name, builder)) in enumerate(zip(specs, builders), 1):
        step = lambda msg, i=i, name=name: progress(f"[{i}/{len(specs)}] {name}: {msg}")
        unwritten: BaseException | None = None
        try:
            with staging(root) as stage:
                if ranks is None:
                    run = profile_target(spec, builder, opts, stage, step)
                else:
                    run = distributed.profile_on_ranks(profile_target, ranks[0], ranks[1], i,
                                                       spec, builder, opts, stage, step)
                reserve(run, stage, root)  # its id, the folder's name, is its own now
                pack_traces(run, stage)  # the report names the trace as it is stored
                try:
                    view = report_view(run, output.lang)
                    reports = [p.name for p in output.write(view, stage, publish=False)]
                except Exception as exc:  # the report is not the run: keep the run
                    unwritten, reports = exc, []
                final = commit(run, stage, root)
        except ReporterError as exc:
            if isinstance(exc, BadInput):
                raise
            warn(exc.one_line())
            failed += 1
            broken = device_broken(exc)
            if broken and i < len(specs):  # every later target would fail with it
                warn(WorkFailed(
                    f"the CUDA context is unusable after {name}'s error ({broken}); the "
                    f"{len(specs) - i} remaining target(s) were not run: run them in a new "
                    "process", error_id="cuda-broken").one_line())
                break
            continue
        if unwritten is not None:
            why = (str(unwritten) if isinstance(unwritten, ReporterError)
                   else f"{type(unwritten).__name__}: {unwritten}")
            warn(WorkFailed(f"{name}'s report could not be written ({why[:300]}); its run is "
                            f"stored as {final}: `reporter render {final.name}` writes the "
                            "report again", error_id=getattr(unwritten, "error_id",
                                                               "report")).one_line())
            failed += 1
            done.append(run)
            continue
        for name_ in reports:
            output.published(final / name_)
        done.append(run)
        step(f"done: ~{view.sections[0].throughput} samples/s, "
             f"{view.n_findings} finding(s)")
    if request.compare:
        if len(done) < 2:
            warn(BadInput("--compare needs two runs that succeeded", error_id="usage").one_line())
            return 1 if failed else 2
        from .compare import Step, compare

        steps = [Step(run.target["name"], run.id, run.sections, run) for run in done]
        write_comparison(compare(steps), root, None, output)
    return 1 if failed else 0


def remove_stale(root: Path, warn: Say = _stderr) -> None:
    """Remove run folders left unfinished by processes that are gone, and say so."""
    from .store import remove_stale as remove

    removed = remove(root)
    if removed:
        warn(f"reporter: removed {removed} unfinished run folder(s) under {root}/ left by "
             "processes that are gone")


def render_run(ref: str, runs: Path, output: Output) -> list[Path]:
    """Reports of a stored run, rendered again into its folder (no profiling)."""
    from .store import find

    return _report_stored(find(ref, runs), output)


def report_view(run: Run, lang: str, log_rows: int | None = None) -> ReportView:
    """A run analyzed and made ready to render in ``lang``: its sections' analyses and
    its ranks' reading; the logs hold ``log_rows`` rows of each operator table (0: all,
    None: the report's default)."""
    from .analyze.analyzer import analyze_run
    from .analyze.reading import ranks_of_run
    from .render.view import run_view

    more = {} if log_rows is None else {"log_rows": log_rows}
    return run_view(run, lang, analyze_run(run), ranks_of_run(run), **more)


def profiles_view(profiles: list[Profile], source: str, lang: str) -> ReportView:
    """Profiles built or read elsewhere, as imported sections, made ready to render."""
    from .ingest.readers import sections_of

    return sections_view(sections_of(profiles), source, lang)


def sections_view(sections: list[Section], source: str, lang: str) -> ReportView:
    """Sections read from someone's tables or traces (reporter.ingest.readers), analyzed
    and made ready to render."""
    from .analyze.analyzer import analyze_section
    from .analyze.reading import ranks_of_profiles
    from .render.view import import_view

    return import_view(sections, source, lang, [analyze_section(s) for s in sections],
                       ranks_of_profiles([s.profile for s in sections]))


def _report_stored(folder: Path, output: Output) -> list[Path]:
    """The reports of the run stored in ``folder``, written into it."""
    from .inputs import load_run

    return output.write(report_view(load_run(folder), output.lang), folder)


def analysis_json(path: str, runs: Path, workers: int | None = None,
                  scheduler: str | None = None) -> dict[str, Any]:
    """``analyze --json``: {profiles: [...]} of a stored run or of recorded profiles (a
    folder of ranks read in ``workers`` processes or on a Dask ``scheduler``: read_sections)."""
    from .analyze.analyzer import analyze_run, analyze_section, profiles_json
    from .inputs import load_run, read_sections, run_folder

    folder = run_folder(path, runs)
    unread_options([(path, folder)], workers, scheduler)
    if folder is None:
        sections = read_sections(Path(path), workers, scheduler)
        return profiles_json([s.profile for s in sections],
                             [analyze_section(s) for s in sections])
    run = load_run(folder)
    return profiles_json(
        [s.profile for s in run.sections], analyze_run(run),
        [{**s.memory, "tensors": asdict(s.tensor_memory) if s.tensor_memory else None,
          "tensors_note": s.tensor_memory_note} for s in run.sections],
        [s.disturbance_json() for s in run.sections])


def analyze(path: str, runs: Path, out: Path, output: Output, workers: int | None = None,
            scheduler: str | None = None) -> list[Path]:
    """Reports of a stored run (into its folder) or of profiler tables and traces (into
    ``out``, named after the file); ``workers`` and ``scheduler`` as for analysis_json."""
    from .inputs import read_sections, run_folder

    folder = run_folder(path, runs)
    unread_options([(path, folder)], workers, scheduler)
    if folder is not None:
        return _report_stored(folder, output)
    source = Path(path)
    view = sections_view(read_sections(source, workers, scheduler), source.name, output.lang)
    return output.write(view, out, stem=report_stem(source))


def report_stem(path: Path) -> str:
    """x.txt -> x.report; a trace's x.json or x.json.gz -> x.json.report (K3: a table and a
    trace of the same name, analyzed into one folder, must not overwrite each other)."""
    from .ingest.traces import TRACE_SUFFIXES

    for suffix in sorted(TRACE_SUFFIXES, key=len, reverse=True):
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.name[:-len(suffix)] + ".json.report"
    return f"{path.stem}.report"


def unread_options(inputs: list[tuple[str, Path | None]], workers: int | None,
                   scheduler: str | None, say: Say = _stderr) -> None:
    """Say, in one line, that --workers or --scheduler has no effect when none of the
    ``inputs`` (each as typed, with the stored run's folder that inputs.run_folder found
    for it, or None) is a folder of per-rank traces (nor, for --workers, a Chrome trace,
    whose chunks it reads in worker processes): a stored run is read from its run.json
    and a table in this process, whatever the options. Not an error:
    what is written is the same, and a script that passes the options to every input
    (a run on one side, a folder of ranks on the other) works unchanged."""
    from .ingest.traces import is_trace

    if any(run is None and Path(arg).is_dir() for arg, run in inputs):
        return
    traces = any(run is None and Path(arg).is_file() and is_trace(Path(arg))
                 for arg, run in inputs)
    given = [name for name, value in (("--workers", workers), ("--scheduler", scheduler))
             if value is not None and not (name == "--workers" and traces)]
    if not given:
        return  # --workers reads a Chrome trace's chunks in worker processes
    what = [f"{printable(run)} is a stored run, read from its run.json" if run is not None
            else f"{printable(arg)} is a single file, read in this process"
            for arg, run in inputs]
    reads = {("--workers",): "it reads folders of per-rank traces and Chrome traces only",
             ("--scheduler",): "it reads folders of per-rank traces only",
             ("--workers", "--scheduler"): "they read folders of per-rank traces only, "
                                           "--workers Chrome traces too"}[tuple(given)]
    say(f"reporter: {' and '.join(given)} {'has' if len(given) == 1 else 'have'} no effect "
        f"({reads}): {'; '.join(dict.fromkeys(what))}")


def compare_inputs(inputs: list[str], runs: Path, workers: int | None = None,
                   scheduler: str | None = None):
    """The comparison of runs or recorded profiles, in order (the first is the base); a
    folder of per-rank traces read in ``workers`` processes or on a Dask ``scheduler``, as
    analyze reads one (inputs.read_sections). Every input is resolved before any is read:
    a mistyped last input fails at once."""
    from .compare import compare, step_of
    from .inputs import run_folder

    if len(inputs) < 2:
        raise BadInput("compare needs at least two inputs: BASE NEW", error_id="usage")
    folders = [run_folder(arg, runs) for arg in inputs]
    unread_options(list(zip(inputs, folders)), workers, scheduler)
    return compare([step_of(arg, folder, workers, scheduler)
                    for arg, folder in zip(inputs, folders)])


def write_comparison(comparison, runs: Path, out: Path | None, output: Output) -> list[Path]:
    """The comparison's reports, in ``out`` or a new runs/compare-<time>/ folder.

    A new folder appears whole or not at all, as a run's does: the reports are written
    into a staging folder under ``runs`` (removed if anything fails or interrupts it; one
    that SIGKILL left, by the next ``run`` or ``list``), which is then renamed onto a
    compare-<time> folder made for it."""
    from .render.view import compare_view
    from .store import OWNER_FILE, move_into, staging

    view = compare_view(comparison, output.lang)
    if out is not None:
        return output.write(view, out, stem="compare")
    with staging(runs) as stage:
        names = [p.name for p in output.write(view, stage, stem="compare", publish=False)]
        (stage / OWNER_FILE).unlink()
        folder = _new_folder(runs, f"compare-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}")
        try:
            move_into(stage, folder)
        except BaseException:
            with contextlib.suppress(OSError):
                folder.rmdir()  # ours, and empty unless another process wrote into it
            raise
    paths = [folder / name for name in names]
    for path in paths:
        output.published(path)
    return paths


def _new_folder(root: Path, name: str) -> Path:
    """A folder created here and now, never one another command made: name, name-2, ..."""
    from .store import new_folder

    return new_folder(root, name)


def target_summaries(lang: str) -> list[tuple[str, str, str]]:
    """(name, seed, what it reproduces) for each built-in target, in ``lang`` (the words are
    the language's: templates/<lang>/targets.j2)."""
    from .collect.target import BUILTINS
    from .render.report import environment, template_errors

    with template_errors(lang):
        words = environment(lang).get_template("targets.j2").module.summary
    return [(name, t.seed, words.get(name, "")) for name, t in BUILTINS.items()]


# What the command line needs besides the work: its choices, ranks started here, the
# stored runs as rows, the comparison's gate. The command line imports nothing else.

def language_choices() -> tuple[tuple[str, ...], str]:
    """The report languages found (templates/<code>/), and the default for this user."""
    from .render.languages import codes, default_language

    return tuple(codes()), default_language()


def language_code(lang: str | None) -> str:
    """A language as typed (None: this user's default), checked: its code."""
    from .render.languages import default_language, language

    return language(lang or default_language()).code


def presets() -> tuple[str, ...]:
    from .collect.target import PRESETS

    return tuple(PRESETS)


def default_suite() -> tuple[str, ...]:
    """The built-in targets ``reporter run`` profiles when none is named."""
    from .collect.target import DEFAULT_SUITE

    return tuple(DEFAULT_SUITE)


def is_other_rank() -> bool:
    """Is this process a rank other than 0 of a distributed run (it prints no progress)?"""
    from .collect import distributed

    world = distributed.world_from_env()
    return world is not None and world.rank != 0


def launch_ranks(argv: list[str], nproc: int, device: str) -> int:
    """``reporter run --nproc N``: the same command started as N ranks on this machine;
    returns rank 0's exit code."""
    from .collect import distributed

    if distributed.world_from_env() is not None:
        raise BadInput("--nproc inside a distributed run: drop it, torchrun started the ranks",
                       error_id="usage")
    distributed.check_devices(nproc, device)
    work_begins()  # from here an interrupt raises, so that the launcher stops its ranks
    return distributed.launch(_without_nproc(argv), nproc)


def _without_nproc(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


@dataclass(frozen=True)
class RunRow:
    """One stored run as ``reporter list`` prints it (error: why it cannot be read)."""

    id: str
    target: str = ""
    device: str = ""
    samples_per_s: str = ""  # formatted in the language asked for; "~" and "(busy)" when busy
    reports: tuple[str, ...] = ()
    error: str | None = None


def list_runs(runs: Path, lang: str, warn: Say = _stderr) -> list[RunRow]:
    """The stored runs, newest first, after removing unfinished ones left by dead processes."""
    from .render.view import Fmt
    from .store import list_runs as stored
    from .validate import well_formed

    fmt = Fmt(lang)
    remove_stale(runs, warn)
    rows = []
    for folder, info in stored(runs):
        # A run is named by its folder, what render, compare and analyze find it by: the
        # id inside a copied run.json could pose as another run (T1).
        name = printable(well_formed(folder.name))
        if "error" in info:
            rows.append(RunRow(name, error=printable(well_formed(info["error"]))))
            continue
        speed = fmt.num(info["samples_per_s"])
        rows.append(RunRow(name, printable(info["target"]), printable(info["device"]),
                           f"~{speed} (busy)" if info["busy"] else speed,
                           tuple(printable(well_formed(r)) for r in info["reports"])))
    return rows


# C0 and C1 controls, and format characters that are invisible or reorder text (as
# reporter.render.markup's, tab included)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f"
                      "\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]")


def printable(value: Any) -> str:
    """A run's value as a terminal may print it: "-" for none, and each control or
    invisible format character (an escape sequence that sets the title or clears the
    screen, a carriage return, a bidirectional override) written out as ``\\x1b``."""
    if value is None:
        return "-"
    return _CONTROL.sub(lambda m: (f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100
                                   else f"\\u{ord(m[0]):04x}"), str(value))


def comparison_json(comparison) -> dict[str, Any]:
    """What ``compare --json`` prints."""
    from .compare import compare_json

    return compare_json(comparison)


def check_slowdown(max_slowdown_pct: float) -> None:
    """--fail-if-slower's percentage, checked before any work."""
    if not 0 <= max_slowdown_pct < 100:  # false for nan
        raise BadInput("--fail-if-slower takes a percentage from 0 to 100", error_id="usage")


def gate(comparison, max_slowdown_pct: float) -> tuple[int, str | None]:
    """``compare --fail-if-slower``: (0, None) when the last input is not slower than the
    first beyond the noise; (3, why) when it is; (4, why) when the machine was too busy to
    tell."""
    from .compare import busy, regression

    check_slowdown(max_slowdown_pct)
    disturbed = busy(comparison)
    if disturbed:
        return 4, (f"could not measure: the machine was busy during {', '.join(disturbed)}; "
                   "run both again on a quiet machine")
    failed, why = regression(comparison, max_slowdown_pct)
    return (3, f"slower than the base: {'; '.join(why)}") if failed else (0, None)
