"""Benchmark: what a busy machine does to a run, and whether reporter says so.

For one built-in target it profiles, interleaved round by round, a quiet run and runs
beside N CPU hogs (processes spinning, started before the run and killed by their pids
after it, each bounded to 5 minutes in any case: reporter.collect.machine.cpu_hogs),
with the default options and a fresh calibration of the peaks each time. Per load it
prints, as medians over the rounds with their range:
- error: the run's throughput median against the quiet runs' median (what the report
  prints), and the same for the median of every window (what reporter printed before it
  left disturbed windows out);
- flagged: the runs whose report opens with the "busy machine" statement, and the
  disturbed windows;
- calibration: the fp32 peak against the quiet runs', and the calibrations marked
  disturbed (their figures are not printed);
- cost: the run's CPU time (this process's user and system time, every thread) and wall
  time against the quiet runs' medians: what a busy machine costs the user (issue #68:
  at most 1.5x the quiet run's CPU time; retries stop once an attempt is as disturbed as
  the one before).

    .venv/bin/python bench/contention.py [--target NAME] [--rounds 2] [--hogs 1,2]
                                         [--threads N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reporter.analyze import peaks as peaks_module  # noqa: E402
from reporter.collect.isa import guard  # noqa: E402
from reporter.collect.machine import cpu_hogs  # noqa: E402
from reporter.collect.runner import RunOptions, profile_target  # noqa: E402
from reporter.collect.target import resolve  # noqa: E402

def one_run(name: str, threads: int | None) -> dict:
    peaks_module._CACHE.clear()  # calibrate under this load, not the first run's
    spec, builder = resolve(name)
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        run = profile_target(spec, builder, RunOptions(device="cpu", threads=threads),
                             Path(scratch))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    s = run.sections[0]
    t = s.throughput
    return {"median": t.median, "all": statistics.median(t.windows), "busy": s.busy,
            "disturbed": t.disturbed_windows, "windows": len(t.windows),
            "fp32": s.peaks["flops"]["fp32"], "peaks_disturbed": s.peaks["disturbed"],
            "cpu_s": cpu, "wall_s": wall, "attempts": s.profile_attempts}


def spread(values: list[float]) -> str:
    if not values:
        return "—"
    return (f"{statistics.median(values):+.1%} ({min(values):+.1%} to {max(values):+.1%})")


def ratio(values: list[float]) -> str:
    return (f"{statistics.median(values):.2f} ({min(values):.2f} to {max(values):.2f})"
            if values else "—")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="transformer-bloat-fixed")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hogs", default="1,2", help="loads to try, in hogs (default 1,2)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch's threads for the runs, as run --threads (default: torch's)")
    args = parser.parse_args()
    guard()  # a CPU that lists AMX and traps it (reporter.collect.isa)
    loads = [0] + [int(x) for x in args.hogs.split(",")]
    results: dict[int, list[dict]] = {n: [] for n in loads}
    for r in range(args.rounds):
        for n in loads:
            with cpu_hogs(n, seconds=300):
                got = one_run(args.target, args.threads)
            results[n].append(got)
            print(f"round {r + 1}, {n} hogs: {got['median']:,.1f} samples/s (all windows "
                  f"{got['all']:,.1f}), {got['disturbed']}/{got['windows']} windows "
                  f"disturbed, busy={got['busy']}, fp32 peak {got['fp32'] / 1e9:.0f} GFLOP/s"
                  f"{' (disturbed)' if got['peaks_disturbed'] else ''}; CPU {got['cpu_s']:.1f} s, "
                  f"wall {got['wall_s']:.1f} s, {got['attempts']} profiling attempt(s)",
                  flush=True)
    quiet = statistics.median(x["median"] for x in results[0])
    quiet_fp32 = statistics.median(x["fp32"] for x in results[0])
    quiet_cpu = statistics.median(x["cpu_s"] for x in results[0])
    quiet_wall = statistics.median(x["wall_s"] for x in results[0])
    print(f"\n{args.target}, {args.rounds} rounds, {args.threads or 'default'} threads; "
          f"quiet: {quiet:,.1f} samples/s, fp32 peak {quiet_fp32 / 1e9:.0f} GFLOP/s")
    print("| hogs | error of the median | error, every window | flagged | disturbed windows "
          "| fp32 peak error | calibration disturbed | CPU time, x quiet | wall, x quiet |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in loads:
        rs = results[n]
        print(f"| {n} | {spread([x['median'] / quiet - 1 for x in rs])} "
              f"| {spread([x['all'] / quiet - 1 for x in rs])} "
              f"| {sum(x['busy'] for x in rs)}/{len(rs)} "
              f"| {sum(x['disturbed'] for x in rs)}/{sum(x['windows'] for x in rs)} "
              f"| {spread([x['fp32'] / quiet_fp32 - 1 for x in rs])} "
              f"| {sum(x['peaks_disturbed'] for x in rs)}/{len(rs)} "
              f"| {ratio([x['cpu_s'] / quiet_cpu for x in rs])} "
              f"| {ratio([x['wall_s'] / quiet_wall for x in rs])} |")


if __name__ == "__main__":
    main()
