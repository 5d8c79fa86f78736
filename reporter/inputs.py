"""What the commands accept as input, resolved in one place (no torch import).

A stored run (its folder, its run.json, its id or a part of it, or 'latest'),
a text file with key_averages() tables, a Chrome trace, or a folder of
per-rank traces.
"""

from __future__ import annotations

from pathlib import Path

from .errors import BadInput
from .profile import Profile


def run_folder(arg: str, runs: Path) -> Path | None:
    """The stored run that ``arg`` names, or None when it names a file or a trace folder."""
    from .store import RUN_FILE, find

    path = Path(arg)
    if path.is_file():
        return path.parent if path.name == RUN_FILE else None
    if path.is_dir():
        return path if (path / RUN_FILE).is_file() else None
    if "/" in arg or "." in path.name:
        raise BadInput(f"{path}: no such file", error_id="bad-input")
    return find(arg, runs)  # a run id, a part of one, or "latest"


def read_profiles(path: Path) -> list[Profile]:
    """Profiles from a table file, a Chrome trace, or a folder of per-rank traces."""
    from .ingest import parse_tables, read_text
    from .traces import is_trace, read_trace, read_trace_folder

    if path.is_dir():
        return read_trace_folder(path)
    if is_trace(path):
        return [read_trace(path)]
    return parse_tables(read_text(path), source=str(path))
