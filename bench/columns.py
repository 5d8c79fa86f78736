"""Benchmark: can columns decoded in worker processes reach #68's targets? A probe.

#68 decided against a compiled decoder: events are to decode chunk by chunk in worker
processes into numpy columns, and the analyses are to read the columns. Before the
analyses are rewritten onto columns (``reporter/analyze/timeline.py`` and the modules it
calls), this measures the two halves of that design on a real trace, against the floor of
``bench/ingest.py`` (a bare typed msgspec decode of the whole file in one process) and its
``nesting`` (the same decode with two fields more, each host thread's operators nested
with a stack and summed per name, events as Python objects), in the same rounds:

- ``columns N``: a fresh process reads the trace 8 MiB at a time, cut where an event ends
  (as reporter's reader cuts it), and hands the chunks to N worker processes (N = 1: no
  pool, the chunks decode in the process itself), cutting with reporter's own pattern and
  sizes. A worker decodes its chunk with msgspec into reporter's own event struct
  (``trace_events._Event``: every field its analyses read) and gathers the host
  operators, the device work and the memory events (reporter's categories) into numpy
  columns:
  name, category and thread ids into the chunk's tables, start, duration, External id,
  correlation, sequence number (device work: bytes copied; memory events: bytes, device
  type, address, the allocator's total); the chunk's Python objects go with it. The
  process maps the chunks' tables onto one and joins the columns, then nests each
  thread's operators with numpy (sorted by start, longer first; an operator's depth is
  how many operators before it are still open at its start, its parent the last one a
  level up) and sums self time, total time and calls per name with ``bincount``: what
  ``nesting`` computes. The self time summed over all names must be ``nesting``'s
  (printed as a check), so the two do the same work. The device work and memory events
  are joined, not analysed.

It prints each case's median wall and CPU time (the process and its workers) with their
range, the ratios of the medians to the floor's, and peak memory (VmHWM) in bytes per
event: the process's, and with its workers' peaks added (they run at once).

    .venv/bin/python bench/columns.py TRACE [--rounds 3] [--workers 1,2,4]

What it leaves out, which the rewrite must add and pay for: the inputs' shapes and
costs, and every analysis past the per-name sums of the host's operators (device
attribution, memory, the step breakdown, the critical path, FLOPs, compile facts, the
findings and the JSON). It reads plain JSON traces only.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from ingest import FLOOR, NESTING, _PEAK, busy  # noqa: E402

# nesting, printing the self time summed over all names besides its counts
NESTING_CHECK = NESTING.replace("print(len(events), len(calls))",
                                "print(len(events), len(calls), repr(sum(own.values())))")

COLUMNS = r'''
import gc, json, os, sys
from operator import attrgetter
from concurrent.futures import ProcessPoolExecutor
import msgspec
import numpy as np
# reporter's own: the event struct its reader decodes (every field its analyses read),
# the categories it keeps, and how it cuts a trace into chunks
from reporter.ingest.trace_events import _Event as Event
from reporter.ingest.traces import (_BOUNDARY as BOUNDARY, _CHUNK as CHUNK,
                                    _EVENTS_START as START, _PIECE as PIECE)
from reporter.model.timeline import DEVICE_CATS as DEVICE, HOST_CATS as HOST

gc.disable()
DECODE = msgspec.json.Decoder(list[Event]).decode

def peak_kb():
    return int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])

def whole(value):
    """A whole number that fits a column, or -1 (none, a string id, a float, past 64 bits)."""
    return value if type(value) is int and -(1 << 63) <= value < 1 << 63 else -1

def columns(chunk):
    """A chunk's host operators, device work and memory events as columns, with the
    chunk's names, categories and threads (each a table the ids index)."""
    host, device, memory = [], [], []
    for e in DECODE(chunk):
        if e.ph == "X":
            if e.cat in HOST:
                host.append(e)
            elif e.cat in DEVICE:
                device.append(e)
        elif e.ph == "i" and e.name == "[memory]" and e.args is not None:
            memory.append(e)
    names, cats, threads = {}, {}, {}
    def thread_ids(events):
        return np.fromiter((threads.setdefault((e.pid, e.tid), len(threads)) for e in events),
                           np.int32, len(events))
    def common(events):
        n = len(events)
        return (np.fromiter((names.setdefault(e.name, len(names)) for e in events), np.int32, n),
                np.fromiter((cats.setdefault(e.cat, len(cats)) for e in events), np.int8, n),
                thread_ids(events),
                np.fromiter(map(attrgetter("ts"), events), np.float64, n),
                np.fromiter(map(attrgetter("dur"), events), np.float64, n))
    def of(events, field):
        get = attrgetter(field)
        return np.fromiter((whole(get(e.args)) if e.args is not None else -1 for e in events),
                           np.int64, len(events))
    h = common(host) + (of(host, "ext"), of(host, "corr"), of(host, "seq"))
    d = common(device) + (of(device, "ext"), of(device, "corr"), of(device, "copied"))
    m = (thread_ids(memory), np.fromiter(map(attrgetter("ts"), memory), np.float64, len(memory)),
         of(memory, "nbytes"), of(memory, "device_type"), of(memory, "addr"),
         of(memory, "total"))
    del host, device, memory
    return list(names), list(cats), list(threads), (h, d, m), os.getpid(), peak_kb()

def chunks(path):
    """The events array's chunks, each a JSON array of whole events."""
    with open(path, "rb") as f:
        buf = bytearray(f.read(PIECE))
        while (m := START.search(buf)) is None:
            buf += f.read(PIECE)
        del buf[:m.end()]
        eof = False
        while True:
            while not eof and len(buf) < CHUNK + PIECE:
                piece = f.read(PIECE)
                eof = not piece
                buf += piece
            step = CHUNK if not eof else 64 << 10  # at the end, small: the tail is short
            cut = BOUNDARY.search(buf, step) if len(buf) > step else None
            if cut is None:
                if eof:
                    break
                piece = f.read(PIECE)  # an event longer than a chunk
                eof = not piece
                buf += piece
                continue
            yield b"[" + bytes(buf[:cut.start() + 1]) + b"]"
            del buf[:cut.end() - 1]
        last, _ = json.JSONDecoder().raw_decode("[" + buf.decode())
        yield msgspec.json.encode(last)

def main(path, workers):
    table, threads = {}, {}
    parts = []
    worker_peaks = {}  # a worker's pid: its peak
    cats = {}
    def gather(result):
        names, cat_names, ths, (host, device, memory), pid, peak = result
        ids = np.array([table.setdefault(n, len(table)) for n in names] or [0], np.int32)
        cids = np.array([cats.setdefault(c, len(cats)) for c in cat_names] or [0], np.int8)
        tids = np.array([threads.setdefault(t, len(threads)) for t in ths] or [0], np.int32)
        for cols in (host, device):
            cols[0][:], cols[1][:], cols[2][:] = ids[cols[0]], cids[cols[1]], tids[cols[2]]
        memory[0][:] = tids[memory[0]]
        parts.append((host, device, memory))
        if pid != os.getpid():
            worker_peaks[pid] = max(peak, worker_peaks.get(pid, 0))
    if workers == 1:
        for chunk in chunks(path):
            gather(columns(chunk))
    else:
        with ProcessPoolExecutor(workers) as pool:
            pending = []
            for chunk in chunks(path):
                pending.append(pool.submit(columns, chunk))
                if len(pending) >= 2 * workers:  # a bounded queue: chunks are read as used
                    gather(pending.pop(0).result())
            for fut in pending:
                gather(fut.result())
    host, device, memory = ([np.concatenate(c) for c in zip(*kind)] for kind in zip(*parts))
    del parts
    # the device work and memory events are joined, not analysed: the probe nests the host
    name, _, thread, ts, dur = host[:5]
    del host
    dur = np.maximum(dur, 0.0)
    order = np.lexsort((-dur, ts, thread))
    name, thread, ts, dur = name[order], thread[order], ts[order], dur[order]
    del order
    end = ts + dur
    n = len(ts)
    own = dur.copy()
    bounds = np.flatnonzero(np.diff(thread)) + 1
    for a, b in zip(np.r_[0, bounds], np.r_[bounds, n]):
        s, e = ts[a:b], end[a:b]
        i = np.arange(b - a)
        # still open at an operator's start: those before it that end after it starts
        closed = np.searchsorted(np.sort(e), s, side="right")  # all that end by then
        depth = i - closed + _ties(s, e)
        parent = np.full(b - a, -1, np.int64)
        for d in range(1, int(depth.max()) + 1 if len(depth) else 0):
            up = np.flatnonzero(depth == d - 1)
            here = np.flatnonzero(depth == d)
            parent[here] = up[np.searchsorted(up, here) - 1]
        has = parent >= 0
        own[a:b] -= np.bincount(parent[has], weights=dur[a:b][has], minlength=b - a)
    k = len(table)
    calls = np.bincount(name, minlength=k)
    total = np.bincount(name, weights=dur, minlength=k)
    own_by_name = np.bincount(name, weights=own, minlength=k)
    print(n, int((calls > 0).sum()), repr(float(own_by_name.sum())))
    sys.stderr.write(f"WORKERS_KB {sum(worker_peaks.values())}\n")

def _ties(s, e):
    """Operators that end where a later one (or they themselves) start count as closed by
    the sorted ends but are counted among those before: put them back."""
    # an operator j >= i with end <= s[i] has s[j] == s[i] == e[j]: a zero-length one at the
    # same start, sorted after the longer ones
    zero = e == s
    same = np.r_[True, s[1:] != s[:-1]]
    group = np.cumsum(same) - 1
    zeros_in_group = np.bincount(group, weights=zero)
    before = np.cumsum(zero) - zero  # zero-length operators before each
    before_in_group = before - before[np.flatnonzero(same)][group]
    return (zeros_in_group[group] - before_in_group).astype(np.int64)

main(sys.argv[1], int(sys.argv[2]))
''' + _PEAK


def _run(code: str, args: list[str]) -> tuple[float, float, int, int, str]:
    """Wall and CPU seconds (the process and its workers), its peak, its workers' peaks
    added, and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    kb = {line.split()[0]: int(line.split()[1]) for line in res.stderr.splitlines()
          if line.startswith(("PEAK_KB", "WORKERS_KB"))}
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, kb.get("PEAK_KB", 0) * 1024, kb.get("WORKERS_KB", 0) * 1024, res.stdout


def _spread(samples: list[float]) -> str:
    return f"{statistics.median(samples):6.2f} s [{min(samples):.2f}-{max(samples):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    cores = len(os.sched_getaffinity(0))
    parser.add_argument("--workers", default=",".join(sorted({"1", "2", str(cores)}, key=int)))
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    cases = [("floor", FLOOR, [str(args.trace)]), ("nesting", NESTING_CHECK, [str(args.trace)])]
    cases += [(f"columns {w}", COLUMNS, [str(args.trace), str(w)]) for w in counts]
    wall = {c[0]: [] for c in cases}
    cpu = {c[0]: [] for c in cases}
    peak = {c[0]: 0 for c in cases}
    peak_all = {c[0]: 0 for c in cases}
    check: dict[str, str] = {}
    load = os.getloadavg()
    disturbed = busy(cores)
    n_events = 0
    for _ in range(args.rounds):
        for label, code, argv in cases:
            w, c, p, pw, out = _run(code, argv)
            wall[label].append(w)
            cpu[label].append(c)
            peak[label] = max(peak[label], p)
            peak_all[label] = max(peak_all[label], p + pw)
            if label == "floor":
                n_events = int(out.split()[0])
            else:
                check[label] = out.split()[-1]
    print(f"trace: {args.trace.name}, {n_events:,} events; {args.rounds} rounds; {cores} cores "
          f"this process may use; load average {load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    if disturbed is not None:
        print(disturbed)
    fw, fc = statistics.median(wall["floor"]), statistics.median(cpu["floor"])
    for label, *_ in cases:
        line = f"{label:10s} wall {_spread(wall[label])}  cpu {_spread(cpu[label])}"
        if label != "floor":
            line += (f"  ratio wall {statistics.median(wall[label]) / fw:.2f}x, "
                     f"cpu {statistics.median(cpu[label]) / fc:.2f}x")
        print(line)
    for label, *_ in cases:
        extra = (f", {peak_all[label] / n_events:,.0f} with its workers"
                 if peak_all[label] != peak[label] else "")
        print(f"{label:10s} peak {peak[label] / n_events:,.0f} bytes per event{extra}")
    own = {label: float(v) for label, v in check.items()}
    worst = max(abs(v - own["nesting"]) / abs(own["nesting"]) for v in own.values())
    print(f"self time summed over names, columns against nesting: at most {worst:.1e} apart")


if __name__ == "__main__":
    main()
