"""What the commands accept as input, resolved in one place (no torch import).

A stored run (its folder, its run.json, its id or a part of it, or 'latest'),
a text file with key_averages() tables, a Chrome trace, or a folder of
per-rank traces.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from .errors import BadInput
from .model.profile import Profile
from .model.run import Run, Section

# Longer names are refused rather than carried through every table and chart: the
# longest real operator and kernel names (templated CUDA kernels) are a few KB.
MAX_NAME = 65_536


def run_folder(arg: str, runs: Path) -> Path | None:
    """The stored run that ``arg`` names, or None when it names a file or a trace folder."""
    from .store import RUN_FILE, find

    path = Path(arg)
    if path.exists() and not path.is_file() and not path.is_dir():
        raise BadInput(f"{path} is not a regular file (a pipe or a device?): give a file "
                       "that holds a table or a trace", error_id="bad-input")
    if path.is_file():
        return path.parent if path.name == RUN_FILE else None
    if path.is_dir():
        return path if (path / RUN_FILE).is_file() else None
    if "/" in arg or "." in path.name:
        raise BadInput(f"{path}: no such file", error_id="bad-input")
    return find(arg, runs)  # a run id, a part of one, or "latest"


def read_sections(path: Path, workers: int | None = None,
                  scheduler: str | None = None) -> list[Section]:
    """The sections of a table file, a Chrome trace, or a folder of per-rank traces, read
    by the reader that knows the input (reporter.ingest.readers), checked and scrubbed; a
    folder's ranks read in ``workers`` processes (None: one per core, 1: in this process)
    or on the Dask cluster whose scheduler is at ``scheduler`` (reporter.ingest.ranks); a
    file is read in this process whatever they say (pipeline.unread_options tells the user)."""
    from .ingest.readers import ReadOptions
    from .ingest.readers import read_sections as read
    from .validate import scrub

    sections = read(path, ReadOptions(costs=costs_wanted(), progress=_progress(),
                                      workers=workers, scheduler=scheduler))
    check_names([s.profile for s in sections], str(path))
    return scrub(sections)  # lone surrogates (a JSON "\ud800", a file name) become U+FFFD


def _progress():
    """Progress lines on stderr, one every 2 seconds at most, with the time since the first."""
    import sys
    import time

    start = last = time.monotonic()

    def say(message: str) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= 2:
            last = now
            print(f"[{now - start:6.1f}s] {message}", file=sys.stderr, flush=True)
    return say


def costs_wanted() -> bool:
    """Whether to read the modelled operators' inputs for the efficiency section (about a
    fifth of the time of reading a large trace): REPORTER_EFFICIENCY=0 skips it."""
    return os.environ.get("REPORTER_EFFICIENCY", "1") != "0"


def check_names(profiles: list[Profile], source: str) -> None:
    """Refuse, in one line, an operator name over ``MAX_NAME`` characters."""
    for p in profiles:
        for op in p.ops + p.ops_by_shape:
            if len(op.name) > MAX_NAME or len(op.input_shapes or "") > MAX_NAME:
                raise BadInput(f"{source}: an operator name of {len(op.name):,} characters, "
                               f"over the limit of {MAX_NAME:,}: not a profiler's output",
                               error_id="too-long")


# A Profile's fields that its trace's timeline gives (reporter.ingest.traces): what a
# stored run's kept trace gives again, read by today's code.
TIMELINE_FIELDS = ("breakdown", "comm_us", "comm_overlap_us", "costs", "cost_basis",
                   "not_modelled_us", "shapes_recorded", "graph_kernels", "graph_kernel_us",
                   "compiled", "peak_live_b", "timeline")


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def load_run(folder: Path, say: Callable[[str], None] = _stderr) -> Run:
    """The run stored in ``folder``, its timeline analyses today's: a section read by
    other code than today's (its profile's timeline stamp differs, or it has none) whose
    trace the run kept has them read again from that trace (the step breakdown, critical
    path, compile facts, FLOP costs, calls read one by one; the operator tables stay as
    stored). ``say`` (stderr) hears how many sections were read again. run.json is not changed:
    the run stays as it was stored, and each render reads again."""
    from .store import load

    run = load(folder)
    again = todays_timeline(run, Path(folder))
    if again:
        say(f"reporter: run {run.id}: {again} section(s) analysed by another reporter "
            "version; their timelines were read again from the traces the run kept")
    return run


def todays_timeline(run: Run, folder: Path) -> int:
    """Read again, from the traces ``run`` kept in ``folder``, the timeline analyses of
    each section (and each rank's) read by other code than today's; how many were. A
    trace that is gone or no longer reads leaves its section as stored."""
    from .ingest.traces import read_trace, timeline_stamp

    stamp, again = timeline_stamp(), 0
    sections = list(run.sections) + [s for r in run.ranks or [] if not r.get("main")
                                     for s in r.get("sections") or []]
    for section in sections:
        p = section.profile
        path = folder / section.trace if section.trace else None
        if p.timeline == stamp or path is None or not path.is_file():
            continue
        try:
            fresh = read_trace(path, shapes=True)
        except BadInput:
            continue
        # where the runner placed each module's forward: from the live model, not the trace
        placed = {name: c.forward_at for name, c in p.op_calls.items() if c.forward_at}
        for name in TIMELINE_FIELDS:
            setattr(p, name, getattr(fresh, name))
        for name, calls in fresh.op_calls.items():
            old = p.op_calls.get(name)
            if name in placed and old is not None and old.module == calls.module:
                calls.forward_at = placed[name]
        p.op_calls = fresh.op_calls
        again += 1
    return again
