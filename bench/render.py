"""Benchmark: rendering one report, PDF against Markdown, for each language.

Renders the stored fixture runs (a CPU run and the recorded CUDA run) in
every language, as Markdown (the baseline) and as PDF (Markdown -> HTML ->
WeasyPrint, with its charts), in one process after one warm-up rendering, and
prints the times and the ratio. A cold start (a new process rendering one
PDF, imports included: WeasyPrint alone takes about 0.9 s to import) is timed
too. Goal: rendering one report under 2 s.

    .venv/bin/python bench/render.py
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from reporter.render.report import write_report  # noqa: E402
from reporter.store import load  # noqa: E402
from reporter.render.view import LANGUAGES, run_view  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "runs"


def timed(fn, repeat: int = 3) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    out = Path(tempfile.mkdtemp(prefix="reporter-render-"))
    runs = {name: load(FIXTURES / name) for name in ("cpu-transformer-bloat", "cuda-seed001")}
    write_report(run_view(runs["cuda-seed001"], "en"), out, "pdf")  # warm-up: imports, fonts
    print(f"{'run':<24} {'lang':<5} {'markdown':>10} {'pdf':>10} {'pdf/md':>8}")
    for name, run in runs.items():
        for lang in LANGUAGES:
            md = timed(lambda run=run, lang=lang: write_report(run_view(run, lang), out, "md"))
            pdf = timed(lambda run=run, lang=lang: write_report(run_view(run, lang), out, "pdf"))
            print(f"{name:<24} {lang:<5} {md * 1000:8.1f}ms {pdf * 1000:8.1f}ms {pdf / md:7.1f}x")
    copy = out / "cuda-seed001"
    shutil.copytree(FIXTURES / "cuda-seed001", copy)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "reporter", "render", str(copy), "--lang", "zh",
                    "--format", "pdf"], check=True, capture_output=True, cwd=out)
    print(f"cold process, zh PDF of cuda-seed001, imports included: "
          f"{time.perf_counter() - start:.2f} s")
    shutil.rmtree(out)


if __name__ == "__main__":
    main()
