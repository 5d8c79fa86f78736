"""Benchmark: ``reporter analyze TRACE --json`` against the floor, a bare decode (#32).

reporter is timed with ``--workers 1`` (this process), ``--workers 2`` and one worker per
core this process may use (its chunks decoded in worker processes: #68), each with the
CPU time of its workers and a peak that adds N times its largest worker's.

The floor is a fresh process that reads the trace and decodes it with msgspec into a
typed struct of the five fields any aggregation reads (``ph``, ``name``, ``ts``,
``dur``, ``tid``), skipping the rest of each event: what no reader of the file can
avoid. Each round runs the floor and then ``reporter analyze TRACE --json`` (a fresh
process too: imports, reading, aggregation, the breakdown, FLOPs, findings and the JSON
printed), so the two are measured side by side under the same load. Between them runs
``nesting``, the least a reader whose events are Python objects can do: the floor's
decode with the two fields more that nesting needs, each host thread's operators sorted
and nested, and self and total time summed per name, nothing else: a reader that does
this and more with events as Python objects, as reporter does, takes longer. It prints
the medians with their range (min-max), the ratio of the medians (the goal: at most 2),
the median of the paired ratios, CPU time (user + system) beside wall time, and each
process's peak memory (VmHWM) in bytes per event and against the file's size. reporter's
modules (and the ``--before`` checkout's) are compiled first, as pip compiles a package
it installs and as the floor's msgspec is: where PYTHONDONTWRITEBYTECODE is set (the
development machine sets it), each run would otherwise compile them again.

    .venv/bin/python bench/ingest.py TRACE [--rounds 5] [--before CHECKOUT]
    .venv/bin/python bench/ingest.py --make TRACE [--min-events 900000]
    .venv/bin/python bench/ingest.py --grow TRACE --from SMALL --size-gb 2

``--make`` profiles the seq2seq target on the CPU (``record_shapes=True``, memory on, as
reporter's runner does) for as many steps as a short probe says make ``--min-events``
events, and exports it (the probe counts fewer events than the trace holds: 90,000 asked
gave 8 steps and 201,907 events). One profile of many steps holds them all in memory
(55 steps had passed 22 GB): ``--grow`` a trace of a few steps instead.
``--grow`` writes a larger trace of the same event mix: SMALL's events repeated, each copy
shifted in time after the one before, until the file holds ``--size-gb`` GB.
``--before`` times an older checkout (``git archive COMMIT | tar -x -C DIR``) in the
same rounds. ``--profile`` runs analyze once under cProfile in this process instead.

    .venv/bin/python bench/ingest.py --ranks [--rounds 3] [--steps 20] [--layers 60]

``--ranks`` times a folder of 64 ranks (tests/kineto_ranks.py writes them in kineto's format,
one of them a planted straggler) read by ``reporter analyze DIR --json`` with
``--workers 1``, ``--workers 2``, one worker per core this process may use, and on a Dask
LocalCluster of 2 worker processes of one thread (``--scheduler``; started afresh for its
turn in each round, not timed, and closed after it, so the other cases run without it).
The cases take turns in each round; it prints each one's median wall and CPU time with
their range and the ratio of the medians to ``--workers 1`` of the same rounds. CPU time
is the command's and its worker processes' (user + system); on the cluster, the Dask
workers' and the scheduler's as well, read from them before and after each run. Every
case's JSON must be the first's, byte for byte.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PEAK = ("sys.stderr.write('PEAK_KB ' + [l.split()[1] for l in open('/proc/self/status') "
         "if l.startswith('VmHWM')][0] + '\\n')")
FLOOR = """\
import sys
from typing import Union
import msgspec

class Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    ts: Union[int, float] = 0
    dur: Union[int, float] = 0
    tid: Union[int, str, None] = None

class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event]

with open(sys.argv[1], "rb") as f:
    events = msgspec.json.decode(f.read(), type=Trace).traceEvents
print(len(events))
""" + _PEAK
# The least any reader that builds Python objects of the events can do to nest them: the
# floor's decode with the two more fields nesting needs (``cat``, ``pid``), each host
# thread's operators sorted and nested with a stack, and self and total time and calls
# summed per name. Nothing else reporter computes (memory, device time, ids, the step
# breakdown, the critical path, FLOPs, findings, the JSON): a reader whose events are
# Python objects and that does all this takes longer (#32).
NESTING = """\
import gc, sys
from collections import defaultdict
from operator import attrgetter
from typing import Union
import msgspec

gc.disable()
HOST = {"cpu_op", "Operator", "user_annotation", "cuda_runtime", "Runtime", "cuda_driver",
        "Driver"}

class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Union[int, float] = 0
    dur: Union[int, float] = 0

class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event]

with open(sys.argv[1], "rb") as f:
    events = msgspec.json.decode(f.read(), type=Trace).traceEvents
threads = {}
for e in events:
    if e.ph == "X" and e.cat in HOST:
        t = threads.get((e.pid, e.tid))
        if t is None:
            t = threads[(e.pid, e.tid)] = []
        t.append(e)
own, total, calls = defaultdict(float), defaultdict(float), defaultdict(int)
for evs in threads.values():
    evs.sort(key=attrgetter("ts"))
    stack = []  # [end, name, time in children, duration]
    for e in evs:
        ts, dur, name = e.ts, max(e.dur, 0), e.name
        while stack and stack[-1][0] <= ts:
            top = stack.pop()
            own[top[1]] += top[3] - top[2]
        if stack:
            stack[-1][2] += dur
        stack.append([ts + dur, name, 0.0, dur])
        total[name] += dur
        calls[name] += 1
    while stack:
        top = stack.pop()
        own[top[1]] += top[3] - top[2]
print(len(events), len(calls))
""" + _PEAK
ANALYZE = ("import resource, sys; from reporter.cli import main; rc = main(sys.argv[1:]); "
           + _PEAK + "; sys.stderr.write('WORKER_KB %d\\n' % "
           "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")


def _run(code: str, args: list[str], root: Path) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds (user + system: its worker processes' too), peak memory
    in bytes (the process's, and its worker processes' at n times the largest one's: a
    bound, they run at once) and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root)}, cwd=root)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    kb = {line.split()[0]: int(line.split()[1]) for line in res.stderr.splitlines()
          if line.startswith(("PEAK_KB", "WORKER_KB"))}
    n = int(args[args.index("--workers") + 1]) if "--workers" in args else 0
    peak = (kb.get("PEAK_KB", 0) + (n * kb.get("WORKER_KB", 0) if n > 1 else 0)) * 1024
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, peak, res.stdout


def busy(cores: int) -> str | None:
    """A line saying the machine was busy in the second before the rounds began (other
    processes' CPU time, as reporter's own runs measure it: reporter.collect.machine),
    else None: other work holds the cores the cases, those with workers most, would use.
    The load average said it a minute late, and counts the benchmark's own processes."""
    sys.path.insert(0, str(ROOT))
    from reporter.collect.machine import Watch

    watch = Watch(cores)
    time.sleep(1.0)
    others = watch.stop().others
    if others is None or others <= 0.25:
        return None
    return (f"busy: other processes kept {others * cores:.1f} of {cores} cores busy before "
            "the rounds began; the times and ratios, those with workers most, are not the "
            "code's")


def _spread(samples: list[float]) -> str:
    return f"{statistics.median(samples):6.2f} s [{min(samples):.2f}-{max(samples):.2f}]"


def bench(trace: Path, rounds: int, before: Path | None) -> None:
    size = trace.stat().st_size
    cores = len(os.sched_getaffinity(0))
    cases = [("floor", FLOOR, [str(trace)], ROOT),
             ("nesting", NESTING, [str(trace)], ROOT)]
    cases += [(f"reporter {n}", ANALYZE, ["analyze", str(trace), "--json", "--workers", str(n)],
               ROOT) for n in sorted({1, 2, cores})]
    if before is not None:
        cases.append(("before", ANALYZE, ["analyze", str(trace), "--json"], before))
    for root in {c[3] for c in cases}:  # reporter's modules compiled, as pip installs them
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "reporter")],
                       check=True, capture_output=True)
    wall: dict[str, list[float]] = {c[0]: [] for c in cases}
    cpu: dict[str, list[float]] = {c[0]: [] for c in cases}
    peak: dict[str, int] = {c[0]: 0 for c in cases}
    load = os.getloadavg()
    disturbed = busy(cores)
    n_events = 0
    for _ in range(rounds):
        for label, code, args, root in cases:
            w, c, p, out = _run(code, args, root)
            wall[label].append(w)
            cpu[label].append(c)
            peak[label] = max(peak[label], p)
            if label == "floor":
                n_events = int(out.split()[0])
    print(f"trace: {trace.name}, {n_events:,} events, {size / 2**20:,.0f} MiB uncompressed; "
          f"{rounds} rounds; {os.cpu_count()} CPUs; load average "
          f"{load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    if disturbed is not None:
        print(disturbed)
    floor_w, floor_c = statistics.median(wall["floor"]), statistics.median(cpu["floor"])
    for label, *_ in cases:
        w, c = wall[label], cpu[label]
        line = f"{label:10s} wall {_spread(w)}  cpu {_spread(c)}"
        if label != "floor":
            paired = [x / y for x, y in zip(w, wall["floor"])]
            line += (f"  ratio {statistics.median(w) / floor_w:.2f}x "
                     f"(paired {statistics.median(paired):.2f}x "
                     f"[{min(paired):.2f}-{max(paired):.2f}], "
                     f"cpu {statistics.median(c) / floor_c:.2f}x)")
        print(line)
    for label, *_ in cases:
        print(f"{label:10s} peak memory {peak[label] / 2**20:,.0f} MiB = "
              f"{peak[label] / max(n_events, 1):,.0f} bytes per event, "
              f"{peak[label] / size:.2f}x the file")
    print("goal (#68): reporter within 2x the floor on 2 cores, within 1x on 4 or more; "
          "reporter N: --workers N (peak: the command's and N times its largest worker's); "
          "nesting: the least a reader whose events are Python objects does (decode, sort, "
          "nest, sum per name)")


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ranks(rounds: int, steps: int, layers: int) -> None:
    """The 64-rank folder read with 1, 2 and all workers and on a LocalCluster of 2."""
    import tempfile

    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the cluster's workers import reporter
    os.environ["PYTHONPATH"] = str(ROOT)
    from distributed import Client, LocalCluster
    from kineto_ranks import write_folder

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "reporter")],
                   check=True, capture_output=True)
    cores = len(os.sched_getaffinity(0))
    cases = [("workers 1", ["--workers", "1"]), ("workers 2", ["--workers", "2"]),
             (f"workers {cores} (all)", ["--workers", str(cores)]), ("dask, 2 workers", [])]
    wall: dict[str, list[float]] = {c[0]: [] for c in cases}
    cpu: dict[str, list[float]] = {c[0]: [] for c in cases}
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_folder(Path(tmp) / "job", ranks=64, steps=steps, layers=layers)
        size = sum(p.stat().st_size for p in folder.iterdir())
        first = None
        for _ in range(rounds):
            for label, options in cases:
                if options:
                    w, c, _, out = _run(ANALYZE, ["analyze", str(folder), "--json", *options],
                                        ROOT)
                else:  # a cluster of this round only: the other cases run without its loops
                    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=":0", silence_logs=50) as cluster, \
                            Client(cluster) as client:
                        def cluster_cpu() -> float:  # its workers' and scheduler's
                            return (sum(client.run(_self_cpu).values())
                                    + client.run_on_scheduler(_self_cpu))
                        before = cluster_cpu()
                        w, c, _, out = _run(ANALYZE, ["analyze", str(folder), "--json",
                                                      "--scheduler", cluster.scheduler_address],
                                            ROOT)
                        c += cluster_cpu() - before
                wall[label].append(w)
                cpu[label].append(c)
                if first is None:
                    first = out
                elif out != first:
                    raise SystemExit(f"{label}: the JSON differs from workers 1's")
    print(f"64 ranks, {size / 2**20:,.0f} MiB ({steps} steps of {layers} layers each); "
          f"{rounds} rounds; {cores} cores this process may use; load average "
          f"{load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    base_w, base_c = statistics.median(wall["workers 1"]), statistics.median(cpu["workers 1"])
    for label, _ in cases:
        w, c = wall[label], cpu[label]
        print(f"{label:18s} wall {_spread(w)} ({statistics.median(w) / base_w:.2f}x)  "
              f"cpu {_spread(c)} ({statistics.median(c) / base_c:.2f}x)")
    print("the same JSON in every case")


def make(trace: Path, min_events: int) -> None:
    import torch  # noqa: F401  (only to profile)
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(ROOT))
    from reporter.collect.runner import _Stepper
    from reporter.collect.target import build, resolve

    spec, builder = resolve("seq2seq")
    step = _Stepper(build(spec, builder, "cpu", "default"), "train", "cpu")
    step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 profile_memory=True) as probe:
        for _ in range(2):
            step()
    steps = -(-min_events // max(1, len(probe.events()) // 2)) + 2
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 profile_memory=True) as prof:
        for _ in range(steps):
            step()
    prof.export_chrome_trace(str(trace))
    print(f"{trace}: {steps} steps, {trace.stat().st_size / 2**20:,.0f} MiB")


_TS = re.compile(rb'"ts": (\d+)(\.\d+)?')
_DUR = re.compile(rb'"dur": (\d+)')


def grow(trace: Path, small: Path, size_gb: float) -> None:
    """SMALL's events again and again, each copy shifted by the span of the one before."""
    data = small.read_bytes()
    start = data.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    end = data.rindex(b"]")
    head, body, tail = data[:start], data[start:end].strip().rstrip(b","), data[end:]
    stamps = [int(m.group(1)) for m in _TS.finditer(body)]
    span = max(stamps) - min(stamps) + max(int(m.group(1)) for m in _DUR.finditer(body)) + 1000
    target = int(size_gb * 1e9)
    written, copy = len(head) + len(tail), 0
    with open(trace, "wb") as out:
        out.write(head)
        while written < target:
            shift = copy * span
            piece = body if copy == 0 else _TS.sub(
                lambda m, s=shift: b'"ts": ' + str(int(m.group(1)) + s).encode()
                + (m.group(2) or b""), body)
            if copy:
                out.write(b",\n")
            out.write(piece)
            written += len(piece) + 2
            copy += 1
        out.write(tail)
    print(f"{trace}: {copy} copies of {small.name}, {trace.stat().st_size / 1e9:.2f} GB")


def profile_once(trace: Path) -> None:
    import cProfile
    import pstats

    sys.path.insert(0, str(ROOT))
    from reporter.cli import main

    with open(os.devnull, "w") as null:
        stdout, sys.stdout = sys.stdout, null
        try:
            prof = cProfile.Profile()
            prof.runcall(main, ["analyze", str(trace), "--json"])
        finally:
            sys.stdout = stdout
    pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path)
    parser.add_argument("--rounds", type=int, default=None, help="5; with --ranks, 3")
    parser.add_argument("--before", type=Path)
    parser.add_argument("--make", type=Path, help="profile seq2seq into this trace")
    parser.add_argument("--min-events", type=int, default=900_000)
    parser.add_argument("--grow", type=Path, help="write a larger trace here")
    parser.add_argument("--from", dest="small", type=Path, help="the trace --grow repeats")
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--ranks", action="store_true",
                        help="time the 64-rank folder locally and on a Dask LocalCluster")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, default=60)
    args = parser.parse_args()
    if args.ranks:
        ranks(args.rounds or 3, args.steps, args.layers)
    elif args.make:
        make(args.make, args.min_events)
    elif args.grow:
        if args.small is None:
            parser.error("--grow needs --from SMALL")
        grow(args.grow, args.small, args.size_gb)
    elif args.trace is None:
        parser.error("give a TRACE, --make or --grow")
    elif args.profile:
        profile_once(args.trace)
    else:
        bench(args.trace, args.rounds or 5, args.before)


if __name__ == "__main__":
    main()
