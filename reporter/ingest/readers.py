"""The readers of what people already have, behind one interface.

A reader is a ``Reader``: ``sniff(path)`` says cheaply whether the input may be its kind
(from the path and the first bytes, never a whole read), ``read(path, options)`` gives the
report's sections. ``read_sections`` asks the readers in the order of ``READERS``; the
first that sniffs the input reads it. A reader that finds, once reading, that the input
is not its kind after all raises ``NotMine``, and the next reader that sniffs it tries
(a JSON-looking file that is no trace may be a table: ``mpirun -l`` prefixes lines with
"[0] "). A new kind of input (a memory snapshot, an Nsight export) is one module with a
``Reader`` and its line in ``READERS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from ..errors import BadInput
from ..model.profile import Profile
from ..model.run import Section


@dataclass(frozen=True)
class ReadOptions:
    """What every reader may be asked: ``costs``, whether to read the modelled operators'
    inputs (the efficiency section); ``progress``, where a long read says how far it is."""

    costs: bool = True
    progress: Callable[[str], None] | None = None
    # a folder of ranks: read in this many worker processes (None: one per core, 1: in
    # this process), or on the Dask cluster whose scheduler is at this address
    workers: int | None = None
    scheduler: str | None = None


class NotMine(BadInput):
    """The input was sniffed as this reader's kind, but is not: the next reader tries."""


class Reader(Protocol):
    name: str  # what the input is, as an error message says it ("a Chrome trace")

    def sniff(self, path: Path) -> bool: ...

    def read(self, path: Path, options: ReadOptions) -> list[Section]: ...


def sections_of(profiles: list[Profile]) -> list[Section]:
    """Sections of imported profiles: no throughput, memory or timings of their own."""
    return [Section(label=p.label, throughput=None, profile=p) for p in profiles]


class RankFolder:
    """A folder of per-rank Chrome traces (a stored run's folder is resolved before)."""

    name = "a folder of per-rank traces"

    def sniff(self, path: Path) -> bool:
        return path.is_dir()

    def read(self, path: Path, options: ReadOptions) -> list[Section]:
        from .ranks import read_ranks

        return sections_of(read_ranks(path, costs=options.costs, progress=options.progress,
                                      workers=options.workers, scheduler=options.scheduler))


class ChromeTrace:
    """A Chrome trace (torch.profiler's export_chrome_trace, kineto's on_trace_ready),
    plain or gzipped."""

    name = "a Chrome trace"

    def sniff(self, path: Path) -> bool:
        from .traces import is_trace

        return path.is_file() and is_trace(path)

    def read(self, path: Path, options: ReadOptions) -> list[Section]:
        from .ranks import chunk_workers, read_trace_in_pool
        from .traces import is_gzip, read_trace

        try:
            n = chunk_workers(path, options.workers)
            return sections_of([read_trace_in_pool(path, options.costs, n) if n > 1
                                else read_trace(path, costs=options.costs)])
        except BadInput as exc:
            if is_gzip(path) or exc.error_id == "too-big" or isinstance(exc, NotMine):
                raise  # a gzip holds no table; a too-big trace is one, refused
            raise NotMine(str(exc), error_id=exc.error_id) from exc


class ProfilerTables:
    """Text with torch.profiler's key_averages() tables (printed, logged, or pasted as
    Markdown)."""

    name = "a profiler table"

    def sniff(self, path: Path) -> bool:
        return True  # the last resort: any text may hold a table; reading it tells

    def read(self, path: Path, options: ReadOptions) -> list[Section]:
        from .tables import parse_tables, read_text

        return sections_of(parse_tables(read_text(path), source=str(path)))


READERS: tuple[Reader, ...] = (RankFolder(), ChromeTrace(), ProfilerTables())


def read_sections(path: Path, options: ReadOptions) -> list[Section]:
    """The sections of an input, read by the first reader that sniffs it and reads it."""
    tried: list[tuple[Reader, NotMine]] = []
    for reader in READERS:
        if not reader.sniff(path):
            continue
        try:
            return reader.read(path, options)
        except NotMine as exc:
            tried.append((reader, exc))
        except BadInput as exc:
            if not tried:
                raise
            raise _tried_all(tried, reader, exc) from exc
    raise BadInput(str(tried[0][1]) if tried else f"{path}: no reader knows this input",
                   error_id=tried[0][1].error_id if tried else "bad-input")


def _tried_all(tried: list[tuple[Reader, NotMine]], last: Reader, exc: BadInput) -> BadInput:
    """One line: the first reader's reason, and what else was tried."""
    first, reason = tried[0]
    names = ", then as ".join([r.name for r, _ in tried] + [last.name])
    return BadInput(f"{reason} (tried as {names}: no table either)"
                    if isinstance(last, ProfilerTables) else f"{reason} (tried as {names})",
                    error_id=reason.error_id)
