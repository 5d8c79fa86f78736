"""Benchmark: aggregating a large profile, reporter analyze vs key_averages() vs HTA.

In one run: profile a workload until the exported Chrome trace holds at least
--min-events events; time ``prof.key_averages()`` (the first call, which builds
the events); export the trace; time ``reporter analyze TRACE --json`` as a whole
process; check that the top 20 operators' calls and times agree within 1%;
report the analyze process's peak memory against the trace's size; and time
Holistic Trace Analysis (the ``traceinsight`` package) loading the same trace,
when it is installed. Prints ratios against the baselines measured in the same
run. Not a test: run it by hand.

    .venv/bin/python bench/aggregate.py [--min-events 500000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from reporter.collect.runner import _Stepper  # noqa: E402
from reporter.collect.target import build, resolve  # noqa: E402

# Peak memory is VmHWM, the high-water mark of the process's own memory: ru_maxrss
# would carry the parent's peak across fork and exec.
_PEAK = ("sys.stderr.write('MAXRSS_KB ' + [l.split()[1] for l in open('/proc/self/status') "
         "if l.startswith('VmHWM')][0] + '\\n')")
ANALYZE = ("import sys; from reporter.cli import main; rc = main(sys.argv[1:]); "
           + _PEAK + "; sys.exit(rc)")
HTA = ("import sys; from hta.trace_analysis import TraceAnalysis; "
       "TraceAnalysis(trace_dir=sys.argv[1]); " + _PEAK)


def run_process(code: str, *argv: str) -> tuple[float, int, str]:
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"failed: {res.stderr.strip()[-2000:]}")
    rss = next((int(line.split()[1]) for line in res.stderr.splitlines()
                if line.startswith("MAXRSS_KB")), 0)
    return elapsed, rss * 1024, res.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-events", type=int, default=500_000)
    parser.add_argument("--target", default="seq2seq")
    args = parser.parse_args()

    spec, builder = resolve(args.target)
    target = build(spec, builder, "cpu", "default")
    step = _Stepper(target, "train", "cpu")
    step()  # warm-up outside the profile
    # How many events a step makes, from a short profile, decides how many steps to profile.
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 profile_memory=True) as probe:
        for _ in range(2):
            step()
    per_step = max(1, len(probe.events()) // 2)
    steps = -(-args.min_events // per_step) + 2
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 profile_memory=True) as prof:
        for _ in range(steps):
            step()

    start = time.perf_counter()
    averages = prof.key_averages()
    t_key_averages = time.perf_counter() - start

    folder = Path(tempfile.mkdtemp(prefix="reporter-bench-"))
    trace = folder / "bench.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    size = trace.stat().st_size
    with open(trace, "rb") as f:
        events = json.load(f)["traceEvents"]
    n_events = len(events)
    del events

    # The median of three runs: this is a whole process on a shared machine.
    samples = [run_process(ANALYZE, "analyze", str(trace), "--json") for _ in range(3)]
    times = sorted(t for t, _, _ in samples)
    t_analyze = times[1]
    rss_analyze = max(rss for _, rss, _ in samples)
    out = samples[0][2]
    (parsed,) = json.loads(out)["profiles"]
    mine = {o["name"]: o for o in parsed["ops"] if o["kind"] != "kernel"}

    top = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[:20]
    worst = 0.0
    for e in top:
        o = mine.get(e.key)
        if o is None:
            raise SystemExit(f"MISMATCH: {e.key} missing from reporter's output")
        if o["calls"] != e.count:
            raise SystemExit(f"MISMATCH: {e.key} calls {o['calls']} != {e.count}")
        for mine_v, theirs in ((o["self_cpu_us"], e.self_cpu_time_total),
                               (o["cpu_total_us"], e.cpu_time_total)):
            rel = abs(mine_v - theirs) / max(abs(theirs), 1e-9)
            worst = max(worst, rel)
            if rel > 0.01:
                raise SystemExit(f"MISMATCH: {e.key} {mine_v:.1f} us != {theirs:.1f} us")

    print(f"workload: {args.target}, {steps} steps; trace: {n_events:,} events, "
          f"{size / 2**20:.1f} MiB uncompressed; torch {torch.__version__}; "
          f"{os.cpu_count()} CPUs")
    print(f"top 20 operators agree: calls exactly, times within {worst:.4%}")
    print(f"key_averages() (in process, first call, once): {t_key_averages:8.2f} s")
    print(f"reporter analyze --json (whole process, median of 3: "
          f"{times[0]:.2f}-{times[-1]:.2f} s): {t_analyze:8.2f} s   "
          f"speed-up vs key_averages: {t_key_averages / t_analyze:.1f}x")
    print(f"reporter analyze peak memory: {rss_analyze / 2**20:.0f} MiB = "
          f"{rss_analyze / size:.2f}x the uncompressed trace (goal: under 3x)")
    try:
        t_hta, rss_hta, _ = run_process(HTA, str(folder))
        print(f"HTA TraceAnalysis load (whole process):  {t_hta:8.2f} s   "
              f"reporter is {t_hta / t_analyze:.1f}x faster; HTA peak memory "
              f"{rss_hta / 2**20:.0f} MiB")
    except SystemExit as exc:
        print(f"HTA (traceinsight) not measured: {str(exc)[-300:]}")
    trace.unlink()
    folder.rmdir()


if __name__ == "__main__":
    main()
