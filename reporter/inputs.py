"""What the commands accept as input, resolved in one place (no torch import).

A stored run (its folder, its run.json, its id or a part of it, or 'latest'),
a text file with key_averages() tables, a Chrome trace, or a folder of
per-rank traces.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import BadInput
from .model.profile import Profile

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


def read_profiles(path: Path, workers: int | None = None,
                  scheduler: str | None = None) -> list[Profile]:
    """Profiles from a table file, a Chrome trace, or a folder of per-rank traces; the
    folder's ranks read in ``workers`` processes (None: one per core, 1: in this process)
    or on the Dask cluster whose scheduler is at ``scheduler`` (reporter.ingest.ranks)."""
    from .ingest.tables import parse_tables, read_text
    from .ingest.traces import is_trace

    if scheduler is not None and not path.is_dir():
        raise BadInput(f"--scheduler reads a folder of per-rank traces; {path} is not one",
                       error_id="usage")
    if path.is_dir():
        from .ingest.ranks import read_ranks

        profiles = read_ranks(path, costs=costs_wanted(), progress=_progress(),
                              workers=workers, scheduler=scheduler)
    elif is_trace(path):
        profiles = _trace_or_table(path)
    else:
        profiles = parse_tables(read_text(path), source=str(path))
    check_names(profiles, str(path))
    from .validate import scrub

    return scrub(profiles)  # lone surrogates (a JSON "\ud800", a file name) become U+FFFD


def _trace_or_table(path: Path) -> list[Profile]:
    """A file that looks like JSON: a trace if it reads as one, else a table (lines that
    start with "[0] ", as mpirun -l prints them, look like JSON too)."""
    from .ingest.tables import parse_tables, read_text
    from .ingest.traces import is_gzip, read_trace

    try:
        return [read_trace(path, costs=costs_wanted())]
    except BadInput as as_trace:
        if is_gzip(path) or as_trace.error_id == "too-big":
            raise
        try:
            return parse_tables(read_text(path), source=str(path))
        except BadInput:
            raise BadInput(f"{as_trace} (tried as a Chrome trace, then as a profiler table: "
                           "no table either)", error_id=as_trace.error_id) from as_trace


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
