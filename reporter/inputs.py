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
from .model.run import Section

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


def read_sections(path: Path) -> list[Section]:
    """The sections of a table file, a Chrome trace, or a folder of per-rank traces, read
    by the reader that knows the input (reporter.ingest.readers), checked and scrubbed."""
    from .ingest.readers import ReadOptions
    from .ingest.readers import read_sections as read
    from .validate import scrub

    sections = read(path, ReadOptions(costs=costs_wanted(), progress=_progress()))
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
