"""Benchmark: a cold ``reporter render RUN --format pdf`` against WeasyPrint's own start.

The floor is what WeasyPrint itself takes, in a fresh process, to import and write a
one-line PDF. Each round runs that baseline and then reporter (a fresh process rendering
one stored fixture run as PDF, imports, charts and fonts included) for each case, so the
two are measured side by side under the same load; the run folder is a fresh copy each
time (no chart left from an earlier round). It prints, per case, the medians of the
baseline and of reporter with their range (min-max), their ratio and difference, and the
median of the paired differences (reporter minus the baseline run just before it).
Goal (#32): reporter - baseline <= 1.5 s.

reporter keeps the templates it compiles (``~/.cache/reporter/templates``), and
scripts/setup.sh compiles them all at install: the rounds run with them compiled (as
after setup.sh, or after any earlier render), and a line "first on a machine" times
the same render with nothing compiled yet (an empty cache each time: reporter installed
by pip alone, the first render on a fresh machine). reporter's modules are compiled
first (``_compiled``), in both checkouts.

``--stages`` adds where one cold render's time goes (a child process timing each stage:
imports, loading and analysing the run, charts, Markdown, HTML, WeasyPrint's layout and
its drawing); ``--warm`` adds the old in-process table, Markdown against PDF per language.

    .venv/bin/python bench/render.py [--rounds 5] [--stages] [--warm] [--before CHECKOUT]

``--before`` times an older checkout (``git archive COMMIT | tar -x -C DIR``) in the
same rounds, for a before/after under the same load.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "runs"
# (fixture, language): the recorded CUDA run (one chart, 7 pages) and the CPU run with
# the most to draw (two sections, eight charts, 14 pages).
CASES = [("cuda-seed001", "zh"), ("cpu-transformer", "ru")]
BASELINE = ("import sys\nfrom weasyprint import HTML\n"
            "HTML(string='<p>reporter</p>').write_pdf(sys.argv[1])\n")


def _env(root: Path = ROOT, cache: Path | None = None) -> dict[str, str]:
    """The environment of a timed process; ``cache``, its XDG_CACHE_HOME (where reporter
    keeps its compiled templates)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    if cache:
        env["XDG_CACHE_HOME"] = str(cache)
    return env


CPU: dict[str, list[float]] = {}  # CPU seconds (user + system, its children included) by label


def _timed(cmd: list[str], cwd: Path, root: Path = ROOT, label: str = "",
           cache: Path | None = None) -> float:
    """Wall seconds of the command; its CPU seconds go to CPU[label]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=cwd, env=_env(root, cache))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(label, []).append(after.ru_utime - before.ru_utime
                                     + after.ru_stime - before.ru_stime)
    return wall


def _compiled(*roots: Path | None) -> None:
    """reporter's modules compiled, as pip compiles a package it installs, scripts/setup.sh
    reporter's, and as WeasyPrint's are for the floor: where PYTHONDONTWRITEBYTECODE is set
    (the development machine sets it) each render would otherwise compile them again
    (0.06 s of it)."""
    for root in roots:
        if root is not None:
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "reporter")],
                           check=True, capture_output=True)


def _templates(cache: Path, root: Path = ROOT) -> None:
    """The report templates of the checkout at ``root`` compiled into ``cache``, as
    scripts/setup.sh compiles them; an older checkout without that function, nothing."""
    subprocess.run([sys.executable, "-c", "from reporter.render.report import "
                    "compile_templates as c; assert c()"], check=root == ROOT,
                   capture_output=True, env=_env(root, cache))


def _spread(samples: list[float]) -> str:
    return f"{statistics.median(samples):5.2f} s [{min(samples):.2f}-{max(samples):.2f}]"


def cold(rounds: int, cases: list[tuple[str, str]], before: Path | None = None) -> None:
    work = Path(tempfile.mkdtemp(prefix="reporter-bench-"))
    base: dict[tuple[str, str], list[float]] = {c: [] for c in cases}
    ours: dict[tuple[str, str], list[float]] = {c: [] for c in cases}
    old: dict[tuple[str, str], list[float]] = {c: [] for c in cases}
    first: dict[tuple[str, str], list[float]] = {c: [] for c in cases}
    kept = work / "cache"  # the user's cache, as after any earlier render on the machine
    _compiled(ROOT, before)
    load = os.getloadavg()[0]
    try:
        # the templates compiled ahead, as scripts/setup.sh does (and any earlier render)
        _templates(kept)
        if before:
            _templates(kept, before)  # (nothing where it had no cache)
        for r in range(rounds):
            for case in cases:
                name, lang = case
                base[case].append(_timed([sys.executable, "-c", BASELINE,
                                          str(work / "one.pdf")], work, label=f"{case} base"))
                folder = work / f"{name}-{r}"
                shutil.copytree(FIXTURES / name, folder)
                command = [sys.executable, "-m", "reporter", "render", str(folder),
                           "--format", "pdf", "--lang", lang]
                ours[case].append(_timed(command, work, label=f"{case} ours", cache=kept))
                shutil.rmtree(folder)
                # the first render on a machine: no template compiled yet
                shutil.copytree(FIXTURES / name, folder)
                first[case].append(_timed(command, work, label=f"{case} first",
                                          cache=work / f"empty-{r}-{name}-{lang}"))
                shutil.rmtree(folder)
                if before:  # the same, with an older checkout of reporter
                    shutil.copytree(FIXTURES / name, folder)
                    old[case].append(_timed(command, work, before, f"{case} before", kept))
                    shutil.rmtree(folder)
    finally:
        shutil.rmtree(work)
    print(f"cold PDF, {rounds} interleaved rounds, {os.cpu_count()} CPUs, "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"{'case':<22} {'WeasyPrint one line':>26} {'reporter':>26} {'ratio':>6} "
          f"{'difference':>10} {'paired difference':>28}")
    for case in cases:
        b, o = base[case], ours[case]
        pairs = [y - x for x, y in zip(b, o)]
        print(f"{case[0] + ' ' + case[1]:<22} {_spread(b):>26} {_spread(o):>26} "
              f"{statistics.median(o) / statistics.median(b):5.1f}x "
              f"{statistics.median(o) - statistics.median(b):8.2f} s {_spread(pairs):>28}")
        rows = [("  first on a machine", first[case])]
        if before:
            rows.append(("  " + str(before)[-20:], old[case]))
        for label, p in rows:  # beside the reporter's line, against the same baseline
            print(f"{label:<22} {'':>26} {_spread(p):>26} "
                  f"{statistics.median(p) / statistics.median(b):5.1f}x "
                  f"{statistics.median(p) - statistics.median(b):8.2f} s "
                  f"{_spread([y - x for x, y in zip(b, p)]):>28}")
    print("CPU time (user + system, children included; less sensitive to the other work on "
          "the machine than wall time):")
    for case in cases:
        b = CPU[f"{case} base"]
        for who in ("ours", "before"):
            if f"{case} {who}" not in CPU:
                continue
            o = CPU[f"{case} {who}"]
            name = case[0] + " " + case[1] + ("" if who == "ours" else " (before)")
            print(f"{name:<31} {_spread(b):>26} {_spread(o):>26} "
                  f"{statistics.median(o) / statistics.median(b):5.1f}x "
                  f"{statistics.median(o) - statistics.median(b):8.2f} s")


def stages_child(folder: Path, lang: str) -> None:
    """Run in a fresh process: one render, timed stage by stage."""
    t0 = last = time.perf_counter()
    times: list[tuple[str, float]] = []

    def mark(stage: str) -> None:
        nonlocal last
        now = time.perf_counter()
        times.append((stage, now - last))
        last = now

    import weasyprint  # noqa: F401
    mark("import weasyprint")
    sys.path.insert(0, str(ROOT))
    from dataclasses import replace

    from reporter.render import pdf, report
    from reporter.pipeline import report_view
    from reporter.store import load
    mark("import reporter (render)")
    run = load(folder)
    view = report_view(run, lang)
    mark("load + analyze + view")
    from reporter.render.charts import draw
    charts = replace(draw(view, folder, report.terms(lang), "report"), mermaid={})
    mark("charts (SVG)")
    markdown = report.render_markdown(view, report.RenderOptions(), charts)
    mark("Markdown (Jinja)")
    pdf.check_fonts(lang)
    page = pdf.to_html(markdown, lang, view.created_iso)
    mark("fc-list + HTML (python-markdown)")
    document = weasyprint.HTML(string=page, base_url=str(folder) + "/",
                               url_fetcher=pdf.url_fetcher(folder, charts.names())).render()
    mark("WeasyPrint layout")
    document.write_pdf()
    mark("WeasyPrint drawing (charts' SVG) + PDF")
    for stage, seconds in times:
        print(f"  {stage:<42} {seconds:6.2f} s")
    print(f"  {'total (after interpreter start)':<42} {time.perf_counter() - t0:6.2f} s, "
          f"{len(document.pages)} pages")


def stages(cases: list[tuple[str, str]]) -> None:
    work = Path(tempfile.mkdtemp(prefix="reporter-bench-"))
    kept = work / "cache"  # the templates compiled ahead, as scripts/setup.sh does
    _compiled(ROOT)
    try:
        _templates(kept)
        for name, lang in cases:
            folder = work / name
            shutil.copytree(FIXTURES / name, folder)
            print(f"stages of one cold render, {name} {lang}:", flush=True)
            subprocess.run([sys.executable, __file__, "--stages-child", str(folder), lang],
                           check=True, env=_env(cache=kept))
    finally:
        shutil.rmtree(work)


def warm() -> None:
    sys.path.insert(0, str(ROOT))
    from reporter.render.report import write_report
    from reporter.render.view import LANGUAGES
    from reporter.pipeline import report_view
    from reporter.store import load

    def timed(fn, repeat: int = 3) -> float:
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    out = Path(tempfile.mkdtemp(prefix="reporter-render-"))
    runs = {name: load(FIXTURES / name) for name in ("cpu-transformer-bloat", "cuda-seed001")}
    write_report(report_view(runs["cuda-seed001"], "en"), out, "pdf")  # warm-up: imports, fonts
    print(f"{'run':<24} {'lang':<5} {'markdown':>10} {'pdf':>10} {'pdf/md':>8}")
    for name, run in runs.items():
        for lang in LANGUAGES:
            md = timed(lambda run=run, lang=lang: write_report(report_view(run, lang), out, "md"))
            pdf = timed(lambda run=run, lang=lang: write_report(report_view(run, lang), out, "pdf"))
            print(f"{name:<24} {lang:<5} {md * 1000:8.1f}ms {pdf * 1000:8.1f}ms {pdf / md:7.1f}x")
    shutil.rmtree(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--before", type=Path, metavar="CHECKOUT",
                        help="also time an older checkout of reporter in the same rounds")
    parser.add_argument("--stages-child", nargs=2, metavar=("FOLDER", "LANG"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stages_child:
        stages_child(Path(args.stages_child[0]), args.stages_child[1])
        return
    cold(args.rounds, CASES, args.before)
    if args.stages:
        stages(CASES)
    if args.warm:
        warm()


if __name__ == "__main__":
    main()
