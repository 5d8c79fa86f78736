"""The command line. Each subcommand parses its options and calls the library.

Exit codes: 0 success, 1 failure while working, 2 bad usage or bad input,
3 a throughput regression (compare --fail-if-slower), 130 interrupted (Ctrl-C),
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
from typing import Any, Callable, Sequence

from . import __version__
from .errors import BadInput, ReporterError, Terminated, WorkFailed, install_signal_handlers

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


def _common(p: argparse.ArgumentParser, formats: bool = True) -> None:
    from .render.report import GITHUB_COMMENT_LIMIT
    from .render.view import LANGUAGES, default_language

    p.add_argument("--lang", default=None, metavar="|".join(LANGUAGES),
                   help=f"report language (default: from your locale, else en; "
                        f"now {default_language()})")
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
    from .collect.target import PRESETS

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
    p.add_argument("--preset", default=None, choices=PRESETS,
                   help="size of the built-in targets: default is quick on a CPU, "
                        "large fills a GPU (default: large on CUDA, else default)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="same as --runs")
    p.add_argument("--time-budget", type=float, default=1.5, metavar="SECONDS",
                   help="seconds of timed windows per target, shared by its modes; timing "
                        "stops early once the median's 95%% interval is within +-2%% "
                        "(default: 1.5)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="run N ranks on this machine (torch.distributed: gloo on the CPU, NCCL "
                        "on GPUs); rank 0 writes one run with every rank in it")
    p.add_argument("--rank-timeout", type=float, default=300.0, metavar="S",
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
                   help="exit with code 3 when the last input's throughput is more than PCT%% "
                        "below the first's and the drop is beyond the measurement's noise")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="where the comparison goes (default: runs/compare-<time>/)")
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
    _common(p)
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("list", help="show stored runs")
    _common(p, formats=False)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("targets", help="built-in targets and what each reproduces")
    _common(p, formats=False)
    p.set_defaults(func=cmd_targets)
    return parser


def _for_output(view: dict, args) -> dict:
    """Options that shape the Markdown: the character limit and GitHub's flavour."""
    from .render.view import Fmt

    if args.max_chars < 0:
        raise BadInput("--max-chars must be 0 (no limit) or more", error_id="usage")
    view["max_chars"] = args.max_chars or None
    view["max_chars_text"] = Fmt(view["lang"]).int(args.max_chars)
    view["github"] = args.github
    return view


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


def _write_reports(view: dict, folder: Path, formats: list[str], args,
                   stem: str = "report") -> None:
    """Write the view in each format into ``folder`` and publish each file."""
    from .render.report import write_report

    for fmt in formats:
        _publish(write_report(view, folder, fmt, stem=stem), args)


def _lang(args) -> str:
    from .render.view import check_language, default_language

    return check_language(args.lang or default_language())


def cmd_run(args) -> int:
    from .collect.distributed import check_devices, launch, world_from_env
    from .collect.target import DEFAULT_SUITE, resolve
    from .render.report import parse_formats

    lang, formats = _lang(args), parse_formats(args.format)
    root = (args.out or args.runs).resolve()  # a target that changes folder keeps it
    specs = args.target or list(DEFAULT_SUITE)
    builders = [resolve(spec) for spec in specs]  # bad specs fail before any work
    if not 0 < args.time_budget <= 3600:
        raise BadInput("--time-budget takes seconds, more than 0 and at most 3600",
                       error_id="usage")
    world = world_from_env()
    if args.nproc is not None:
        if world is not None:
            raise BadInput("--nproc inside a distributed run: drop it, torchrun started the ranks",
                           error_id="usage")
        check_devices(args.nproc, args.device)
        return launch(_without_nproc(args.argv), args.nproc)
    progress = Progress(args.quiet or (world is not None and world.rank != 0))
    from .collect.runner import RunOptions, default_preset, resolve_device  # imports torch

    device = resolve_device(args.device)
    opts = RunOptions(device=device, preset=default_preset(device, args.preset),
                      time_budget_s=args.time_budget)
    if world is not None:
        from dataclasses import replace

        from .collect import distributed

        opts = replace(opts, device=distributed.init(world, opts.device, args.rank_timeout))
        kv = distributed.Peers(distributed.store(world, args.rank_timeout), world,
                               args.rank_timeout)
        try:
            if world.rank != 0:
                return _run_other_rank(world, kv, specs, builders, opts, args)
            return _run_targets(specs, builders, opts, root, lang, formats, args, world, kv,
                                progress)
        finally:
            distributed.finish()
    return _run_targets(specs, builders, opts, root, lang, formats, args, None, None, progress)


def _run_targets(specs, builders, opts, root: Path, lang: str, formats: list[str], args,
                 world, kv, progress: Progress) -> int:
    """Profile each target (with the other ranks, in a distributed run) and store its run."""
    from .collect.runner import profile_target
    from .render.report import write_report
    from .render.view import run_view
    from .store import commit, staging

    _remove_stale(root)
    progress(f"profiling {len(specs)} target(s) on {opts.device}, preset {opts.preset}"
             + (f", {world.size} ranks" if world else ""))
    failed = 0
    done = []
    for i, (spec, (name, builder)) in enumerate(zip(specs, builders), 1):
        step = lambda msg, i=i, name=name: progress(f"[{i}/{len(specs)}] {name}: {msg}")
        try:
            with staging(root) as stage:
                if world is None:
                    run = profile_target(spec, builder, opts, stage, step)
                else:
                    run = _gather_ranks(world, kv, i, spec, builder, opts, stage, step, args)
                view = _for_output(run_view(run, lang), args)
                reports = [write_report(view, stage, fmt).name for fmt in formats]
                final = commit(run, stage, root)
        except ReporterError as exc:
            if isinstance(exc, BadInput):
                raise
            print(exc.one_line(), file=sys.stderr)
            failed += 1
            continue
        for name_ in reports:
            _publish(final / name_, args)
        done.append(run)
        step(f"done: ~{view['sections'][0]['throughput']} samples/s, "
             f"{view['n_findings']} finding(s)")
    if args.compare:
        if len(done) < 2:
            print(BadInput("--compare needs two runs that succeeded",
                           error_id="usage").one_line(), file=sys.stderr)
            return 1 if failed else 2
        from .compare import Step, compare

        steps = [Step(run.target["name"], run.id, run.sections, run) for run in done]
        _write_comparison(compare(steps), lang, formats, root, None, args)
    return 1 if failed else 0


def _remove_stale(root: Path) -> None:
    from .store import remove_stale

    removed = remove_stale(root)
    if removed:
        print(f"reporter: removed {removed} unfinished run folder(s) under {root}/ left by "
              "processes that are gone", file=sys.stderr)


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


def _run_other_rank(world, peers, specs, builders, opts, args) -> int:
    """A rank other than 0: profile each target, post the result to rank 0, write nothing."""
    import tempfile
    from dataclasses import replace

    from .collect import distributed
    from .collect.runner import profile_target

    for i, (spec, (_, builder)) in enumerate(zip(specs, builders), 1):
        key = f"reporter/{i}"
        target_opts = replace(opts, agree=lambda n, key=key: peers.agree(key, n))
        with tempfile.TemporaryDirectory() as scratch:
            try:
                run = profile_target(spec, builder, target_opts, Path(scratch))
                result = {"status": "ok", "error": None, "run": run.to_dict()}
                traces = distributed.trace_files(Path(scratch))
            except ReporterError as exc:
                result, traces = {"status": "failed", "error": str(exc)}, {}
            distributed.post(peers.kv, key, world.rank, result, traces)
    return 0


def _gather_ranks(world, peers, i, spec, builder, opts, stage, step, args):
    """Rank 0: profile, then wait for the other ranks and merge them into one run."""
    from dataclasses import replace

    from .collect import distributed
    from .collect.runner import profile_target

    key = f"reporter/{i}"
    own, own_error = None, None
    try:
        own = profile_target(spec, builder, replace(opts, agree=lambda n: peers.agree(key, n)),
                             stage, step)
    except ReporterError as exc:
        own_error = str(exc)
        print(f"reporter: rank 0: {exc.one_line()}", file=sys.stderr)
    step(f"waiting for ranks 1-{world.size - 1} (up to {args.rank_timeout:g} s)")
    results = peers.collect(key)
    run = distributed.merge(own, own_error, results, stage)
    if run is None:
        why = "; ".join(f"rank {r}: {res.get('error')}" for r, res in sorted(results.items()))
        raise WorkFailed(f"no rank finished profiling {spec}: rank 0: {own_error}; {why}",
                         error_id="ranks-failed")
    for entry in run.ranks:
        if entry["status"] != "ok":
            step(f"rank {entry['rank']} {entry['status']}: {entry['error']}")
    return run


def _write_comparison(comparison, lang: str, formats: list[str], runs: Path,
                      out: Path | None, args) -> None:
    from datetime import datetime, timezone

    from .render.view import compare_view

    out = out or _new_folder(runs, f"compare-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}")
    _write_reports(_for_output(compare_view(comparison, lang), args), out, formats, args,
                   stem="compare")


def _new_folder(root: Path, name: str) -> Path:
    """A folder created here and now, never one another command made: name, name-2, ..."""
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = root / (name if n == 1 else f"{name}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise WorkFailed(f"{root}: 999 folders named {name}*: clean up old comparisons",
                     error_id="io")


def cmd_compare(args) -> int:
    from .compare import compare, compare_json, load_step, regression
    from .render.report import parse_formats

    lang, formats = _lang(args), parse_formats(args.format)
    if args.fail_if_slower is not None and not 0 <= args.fail_if_slower < 100:
        raise BadInput("--fail-if-slower takes a percentage from 0 to 100", error_id="usage")
    if len(args.inputs) < 2:
        raise BadInput("compare needs at least two inputs: BASE NEW", error_id="usage")
    comparison = compare([load_step(arg, args.runs) for arg in args.inputs])
    if args.json:
        _print_json(compare_json(comparison))
    else:
        _write_comparison(comparison, lang, formats, args.runs, args.out, args)
    if args.fail_if_slower is not None:
        failed, why = regression(comparison, args.fail_if_slower)
        if failed:
            print(f"reporter: slower than the base: {'; '.join(why)}", file=sys.stderr)
            return 3
    return 0


def cmd_render(args) -> int:
    from .render.report import parse_formats
    from .render.view import run_view
    from .store import find, load

    lang, formats = _lang(args), parse_formats(args.format)
    folder = find(args.run, args.runs)
    _write_reports(_for_output(run_view(load(folder), lang), args), folder, formats, args)
    return 0


def cmd_analyze(args) -> int:
    from dataclasses import asdict

    from .analyze import efficiency
    from .analyze.analyzer import profiles_json
    from .inputs import read_profiles
    from .inputs import run_folder as find_run
    from .render.report import parse_formats
    from .render.view import import_view, run_view
    from .store import load

    lang = _lang(args)
    formats = parse_formats(args.format)
    path = Path(args.path)
    run_folder = find_run(args.path, args.runs)
    if run_folder is not None:
        run = load(run_folder)
        if args.json:
            _print_json(profiles_json(
                [s.profile for s in run.sections],
                [{**s.memory, "tensors": asdict(s.tensor_memory) if s.tensor_memory else None,
                  "tensors_note": s.tensor_memory_note} for s in run.sections],
                [efficiency.of_section(s, run.target.get("batch_size")) for s in run.sections],
                [s.whatif for s in run.sections]))
            return 0
        _write_reports(_for_output(run_view(run, lang), args), run_folder, formats, args)
        return 0
    profiles = read_profiles(path)
    if args.json:
        _print_json(profiles_json(profiles))
        return 0
    _write_reports(_for_output(import_view(profiles, path.name, lang), args), args.out,
                   formats, args, stem=_report_stem(path))
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


def _report_stem(path: Path) -> str:
    """x.txt -> x.report, and a trace's x.json or x.json.gz -> x.report too."""
    from .ingest.traces import TRACE_SUFFIXES

    for suffix in sorted(TRACE_SUFFIXES, key=len, reverse=True):
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.name[:-len(suffix)] + ".report"
    return f"{path.stem}.report"


def cmd_list(args) -> int:
    from .render.view import Fmt
    from .store import list_runs

    fmt = Fmt(_lang(args))
    _remove_stale(args.runs)
    rows = list_runs(args.runs)
    if not rows:
        print(f"no stored runs under {args.runs}/ (make one with: reporter run)",
              file=sys.stderr)
        return 0
    print(f"{'RUN':<52} {'TARGET':<24} {'DEVICE':<6} {'SAMPLES/S':>10}  REPORTS")
    for folder, info in rows:
        if "error" in info:
            print(f"{folder.name:<52} (unreadable: {info['error']})")
            continue
        print(f"{info['id']:<52} {info['target']:<24} {info['device']:<6} "
              f"{fmt.num(info['samples_per_s']):>10}  {', '.join(info['reports']) or '-'}")
    return 0


def cmd_targets(args) -> int:
    from .collect.target import BUILTINS

    lang = _lang(args)
    width = max(len(n) for n in BUILTINS)
    for name, t in BUILTINS.items():
        print(f"{name:<{width}}  [seed {t.seed}] {t.summary[lang]}")
    print("\nYour own: --target module:function or --target path/to/file.py:function "
          "(see README: 'Your own target')")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    restore_signals = install_signal_handlers()
    try:
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
        print(f"reporter: {'terminated' if terminated else 'interrupted'}; nothing "
              "half-written was kept", file=sys.stderr)
        return 143 if terminated else 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a folder that cannot be written, a full disk: the user's to fix
        if debug:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        print(f"reporter: error [io]: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: still one line, unless --debug
        if debug:
            raise
        print(f"reporter: internal error: {type(exc).__name__}: "
              f"{' '.join(str(exc).split())[:300]} (run with --debug for the traceback)",
              file=sys.stderr)
        return 1
    finally:
        restore_signals()


if __name__ == "__main__":
    sys.exit(main())
