"""Benchmark: what judging efficiency costs.

1. ``reporter analyze TRACE`` (a whole process, the Markdown report) on a trace of
   at least --min-events events, with the efficiency section and without it
   (REPORTER_EFFICIENCY=0), interleaved; prints the medians, their spread and the
   ratio (goal: under 1.2).
2. The calibration of this machine's peaks (``reporter.collect.calibrate.measure``), timed
   --repeats times in this process: median and spread of its duration (goal:
   under 2 s), and the peaks it found.

Not a test: run it by hand.

    .venv/bin/python bench/efficiency.py [--min-events 500000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from reporter.collect.calibrate import measure  # noqa: E402
from reporter.collect.isa import guard  # noqa: E402

guard()  # a CPU that lists AMX and traps it (reporter.collect.isa)
from reporter.collect.runner import _Stepper  # noqa: E402
from reporter.collect.target import build, resolve  # noqa: E402


def make_trace(target: str, min_events: int, folder: Path) -> tuple[Path, int]:
    """A Chrome trace of training steps of a built-in target, with shapes recorded."""
    spec, builder = resolve(target)
    step = _Stepper(build(spec, builder, "cpu", "default"), "train", "cpu")
    step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as probe:
        for _ in range(2):
            step()
    per_step = max(1, len(probe.events()) // 2)
    steps = -(-min_events // per_step) + 2
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 profile_memory=True) as prof:
        for _ in range(steps):
            step()
    trace = folder / "bench.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    return trace, steps * per_step


def analyze_s(trace: Path, out: Path, efficiency: bool) -> float:
    env = {**os.environ, "REPORTER_EFFICIENCY": "1" if efficiency else "0"}
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "reporter", "analyze", str(trace), "--out",
                          str(out), "--lang", "en"], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"analyze failed: {res.stderr.strip()[-2000:]}")
    return elapsed


def spread(values: list[float]) -> str:
    return (f"median {statistics.median(values):.2f} s "
            f"(min {min(values):.2f}, max {max(values):.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-events", type=int, default=500_000)
    parser.add_argument("--target", default="seq2seq")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="reporter-bench-"))
    trace, events = make_trace(args.target, args.min_events, folder)
    print(f"trace: about {events:,} events, {trace.stat().st_size / 2**20:.0f} MiB; "
          f"torch {torch.__version__}; {os.cpu_count()} CPUs")
    with_eff, without = [], []
    for _ in range(args.repeats):  # interleaved: drift on a shared machine hits both
        without.append(analyze_s(trace, folder / "off", efficiency=False))
        with_eff.append(analyze_s(trace, folder / "on", efficiency=True))
    ratios = [a / b for a, b in zip(with_eff, without)]
    print(f"reporter analyze without efficiency: {spread(without)}")
    print(f"reporter analyze with efficiency:    {spread(with_eff)}")
    print(f"ratio with/without: median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}; goal: under 1.2)")

    durations, last = [], None
    for _ in range(args.repeats):
        last = measure("cpu")
        durations.append(last.seconds)
    print(f"calibration of the CPU's peaks: {spread(durations)} (goal: under 2 s)")
    print("  peaks: " + ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in last.flops.items())
          + f"; copy bandwidth {last.bandwidth / 1e9:.1f} GB/s; {last.reference}")
    trace.unlink()


if __name__ == "__main__":
    main()
