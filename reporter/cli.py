"""The command line. Each subcommand parses its options and calls one function of
``reporter.pipeline``; what it prints and its exit code are decided here.

Exit codes: 0 success, 1 failure while working, 2 bad usage or bad input,
3 a throughput regression (compare --fail-if-slower), 4 could not measure (compare
--fail-if-slower on a run the machine's other work disturbed), 130 interrupted (Ctrl-C),
143 terminated (SIGTERM). Errors
are one line on stderr; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from . import __version__
from .errors import (BadInput, ReporterError, Terminated, WorkFailed, install_signal_handlers,
                     interrupted_line)

if TYPE_CHECKING:
    from .pipeline import Output

# reporter.pipeline (and the renderers, Jinja and Babel behind it) is imported in each
# command, once main() handles interrupts: a Ctrl-C while they load is one line too.

DEFAULT_RUNS = Path(os.environ.get("REPORTER_RUNS", "runs"))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors: one line, exit 2
        raise BadInput(f"{message} (see '{self.prog} --help')", error_id="usage")


class Progress:
    """Progress lines on stderr for long work: what is being done, and since when."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            elapsed = time.perf_counter() - self.start
            print(f"[{elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)


MAX_RANK_TIMEOUT_S = 86_400.0


def _rank_timeout(text: str) -> float:
    """--rank-timeout: seconds, more than 0 and at most a day (torch takes milliseconds as
    an integer: nan, inf and negative numbers fail deep in its sockets)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_RANK_TIMEOUT_S:  # false for nan
        raise argparse.ArgumentTypeError(f"takes seconds, more than 0 and at most "
                                         f"{MAX_RANK_TIMEOUT_S:,.0f}, not {text[:20]!r}")
    return value


MAX_WORKERS = 1024


def _workers(text: str) -> int:
    """--workers: a whole number from 1 to MAX_WORKERS."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"takes a number of processes from 1 to "
                                         f"{MAX_WORKERS:,}, not {text[:20]!r}")
    return value


def _rank_reading(p: argparse.ArgumentParser) -> None:
    """--workers and --scheduler, for the commands that read folders of per-rank traces
    and Chrome traces (analyze, compare): the same options, checks and defaults in both."""
    p.add_argument("--workers", type=_workers, default=None, metavar="N",
                   help="read a folder's ranks, or a Chrome trace's chunks, in N processes "
                        "(default: a folder's ranks one per core this process may use, at "
                        "most one per rank, a trace in this process; 1: in this process); "
                        "no effect on a stored run or a table")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:8786",
                   help="read a folder's ranks on a Dask cluster (pip install "
                        "'reporter[dask]'): its workers must see the folder at the same "
                        "path; no effect on a stored run or a single file")


def _common(p: argparse.ArgumentParser, formats: bool = True) -> None:
    from .pipeline import GITHUB_COMMENT_LIMIT, language_choices

    codes, default = language_choices()
    p.add_argument("--lang", default=None, metavar="|".join(codes),
                   help=f"report language (default: from your locale, else en; "
                        f"now {default})")
    if formats:
        p.add_argument("--format", default="md", metavar="md,pdf",
                       help="comma-separated output formats: md, pdf (default: md)")
        p.add_argument("--max-chars", type=int, default=GITHUB_COMMENT_LIMIT, metavar="N",
                       help="keep the Markdown under N characters, shortening the folded logs "
                            f"first (default: {GITHUB_COMMENT_LIMIT}, a GitHub comment; "
                            "0: no limit)")
        p.add_argument("--github", action="store_true",
                       help="for pull requests: charts as Mermaid; when $GITHUB_STEP_SUMMARY is "
                            "set, append the report to the job summary")
    p.add_argument("--runs", type=Path, default=DEFAULT_RUNS, metavar="DIR",
                   help=f"where runs are stored (default: {DEFAULT_RUNS}/, or $REPORTER_RUNS)")


def build_parser() -> argparse.ArgumentParser:
    from .pipeline import presets

    parser = _Parser(prog="reporter", description="Profile PyTorch models and write "
                     "performance reports in English, Russian or Chinese.")
    parser.add_argument("--version", action="version", version=f"reporter {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("run", help="profile targets, store the runs and write reports")
    p.add_argument("--target", action="append", metavar="NAME|module:fn|file.py:fn",
                   help="target to profile; repeat for several (default: every built-in target)")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"),
                   help="auto takes CUDA when present (default: auto)")
    p.add_argument("--preset", default=None, choices=presets(),
                   help="size of the built-in targets: default is quick on a CPU, "
                        "large fills a GPU (default: large on CUDA, else default)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="same as --runs")
    p.add_argument("--time-budget", type=float, default=1.5, metavar="SECONDS",
                   help="seconds of timed windows per target, shared by its modes; timing "
                        "stops early once the median's 95%% interval is within +-2%% "
                        "(default: 1.5)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch's intra-op threads for the run (default: torch's own, one per "
                        "core); on a shared machine --threads 1 gives steadier figures")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="run N ranks on this machine (torch.distributed: gloo on the CPU, NCCL "
                        "on GPUs); rank 0 writes one run with every rank in it")
    p.add_argument("--rank-timeout", type=_rank_timeout, default=300.0, metavar="S",
                   help="how long rank 0 waits for the other ranks, and the collectives' "
                        "timeout (default: 300)")
    p.add_argument("--compare", action="store_true",
                   help="also compare the runs in the order of --target (a baseline, then its "
                        "fix) and write the comparison under runs/compare-<time>/")
    _common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compare", help="compare runs or profiles in order: BASE NEW [MORE ...]")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="runs (folder, run.json, id, 'latest') or anything analyze reads")
    p.add_argument("--fail-if-slower", type=float, default=None, metavar="PCT",
                   help="exit with code 4 when the machine was too busy to tell, and with code "
                        "3 when the last input's throughput is more than PCT%% "
                        "below the first's and the drop is beyond the measurement's noise")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="where the comparison goes (default: runs/compare-<time>/)")
    _rank_reading(p)
    _common(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("render", help="render a stored run again, without profiling")
    p.add_argument("run", metavar="RUN", help="run folder, run.json, run id, or 'latest'")
    _common(p)
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("analyze", help="analyze profiler tables you already have, or a stored run")
    p.add_argument("path", metavar="PATH",
                   help="key_averages().table() text (or a Markdown table made from it), a "
                        "Chrome trace (.json or .json.gz), a folder of per-rank traces, a run "
                        "folder, a run.json, or a run id")
    p.add_argument("--json", action="store_true",
                   help="print {profiles: [{label, totals, breakdown, efficiency, ops, "
                        "findings}]} instead of a report")
    p.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                   help="where reports of table files go (default: the current folder); "
                        "a run's reports go into its folder")
    _rank_reading(p)
    _common(p)
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("list", help="show stored runs")
    _common(p, formats=False)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("targets", help="built-in targets and what each reproduces")
    _common(p, formats=False)
    p.set_defaults(func=cmd_targets)
    return parser


def _output(args) -> Output:
    """The report options of a command, checked."""
    from .pipeline import Output, language_code

    return Output.parse(language_code(args.lang), args.format, args.max_chars,
                        args.github, published=lambda path: _publish(path, args))


def _publish(path: Path, args) -> None:
    """Print a written report's path; with --github, add the Markdown to the job summary."""
    print(path)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if args.github and summary and path.suffix == ".md":
        try:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(path.read_text(encoding="utf-8") + "\n")
        except OSError as exc:
            raise WorkFailed(f"cannot append to $GITHUB_STEP_SUMMARY ({summary}): "
                             f"{exc.strerror}", error_id="github") from exc


def cmd_run(args) -> int:
    from . import pipeline

    output = _output(args)
    request = pipeline.RunRequest(tuple(args.target or pipeline.default_suite()), args.device,
                                  args.preset, args.time_budget, args.rank_timeout,
                                  args.compare, args.threads)
    pipeline.check_run_request(request)  # bad specs fail before any work
    if args.nproc is not None:
        return pipeline.launch_ranks(args.argv, args.nproc, args.device)
    progress = Progress(args.quiet or pipeline.is_other_rank())
    return pipeline.run_targets(request, (args.out or args.runs).resolve(), output, progress)


def cmd_compare(args) -> int:
    from . import pipeline

    output = _output(args)
    if args.fail_if_slower is not None:
        pipeline.check_slowdown(args.fail_if_slower)
    comparison = pipeline.compare_inputs(args.inputs, args.runs, args.workers, args.scheduler)
    if args.json:
        _print_json(pipeline.comparison_json(comparison))
    else:
        pipeline.write_comparison(comparison, args.runs, args.out, output)
    if args.fail_if_slower is not None:
        code, why = pipeline.gate(comparison, args.fail_if_slower)
        if why:
            print(f"reporter: {why}", file=sys.stderr)
        return code
    return 0


def cmd_render(args) -> int:
    from . import pipeline
    pipeline.render_run(args.run, args.runs, _output(args))
    return 0


def cmd_analyze(args) -> int:
    from . import pipeline
    output = _output(args)
    if args.json:
        _print_json(pipeline.analysis_json(args.path, args.runs, args.workers, args.scheduler))
    else:
        pipeline.analyze(args.path, args.runs, args.out, output, args.workers, args.scheduler)
    return 0


def _print_json(data: Any) -> None:
    """Strict JSON on stdout: a number that is not finite is printed as null."""
    import json

    print(json.dumps(_finite(data), ensure_ascii=False, allow_nan=False))


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def cmd_list(args) -> int:
    from . import pipeline

    rows = pipeline.list_runs(args.runs, pipeline.language_code(args.lang))
    if not rows:
        print(f"no stored runs under {args.runs}/ (make one with: reporter run)",
              file=sys.stderr)
        return 0
    print(f"{'RUN':<52} {'TARGET':<24} {'DEVICE':<6} {'SAMPLES/S':>10}  REPORTS")
    for row in rows:
        if row.error is not None:
            print(f"{row.id:<52} (unreadable: {row.error})")
            continue
        print(f"{row.id:<52} {row.target:<24} {row.device:<6} "
              f"{row.samples_per_s:>10}  {', '.join(row.reports) or '-'}")
    return 0


def cmd_targets(args) -> int:
    from . import pipeline
    rows = pipeline.target_summaries(pipeline.language_code(args.lang))
    width = max(len(name) for name, _, _ in rows)
    for name, seed, summary in rows:
        print(f"{name:<{width}}  [seed {seed}] {summary}")
    print("\nYour own: --target module:function or --target path/to/file.py:function "
          "(see docs/targets.md, 'Your own target')")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; ``argv`` None: this process's own (the ``reporter`` command), where
    an interrupt before the command has made anything ends the process at once
    (errors.install_signal_handlers)."""
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    restore_signals: Callable[[], None] = lambda: None
    try:
        restore_signals = install_signal_handlers(exit_at_once=own_process)
        parser = build_parser()
        args = parser.parse_args(argv)
        args.argv = argv
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return 2
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except ReporterError as exc:
        if debug:
            import traceback
            traceback.print_exc()
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(interrupted_line(terminated), file=sys.stderr)
        return 143 if terminated else 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a folder that cannot be written, a full disk: the user's to fix
        if debug:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        print(f"reporter: error [io]: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except MemoryError:
        if debug:
            raise
        print("reporter: error [memory]: ran out of memory (the input is too large for this "
              "machine's memory or its limits)", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: still one line, unless --debug
        if debug:
            raise
        if type(exc).__name__ in _LOST_PEERS:  # torch.distributed's: another rank died
            first = (str(exc).strip().splitlines() or [""])[0]
            print(f"reporter: error [ranks]: this rank lost contact with the others "
                  f"({type(exc).__name__}: {first[:200]}): one of them stopped or was killed",
                  file=sys.stderr)
            return 1
        print(f"reporter: internal error: {type(exc).__name__}: "
              f"{' '.join(str(exc).split())[:300]} (run with --debug for the traceback)",
              file=sys.stderr)
        return 1
    finally:
        restore_signals()


# torch.distributed's errors when a peer rank vanished mid-collective (their message holds
# the C++ stack of c10d: only its first line is the news)
_LOST_PEERS = ("DistNetworkError", "DistBackendError", "DistStoreError")


if __name__ == "__main__":
    sys.exit(main())
