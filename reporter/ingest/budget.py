"""How much memory reading a trace takes (reporter.ingest.traces), and the refusal of a
trace that would not fit: its events counted before they are decoded (a plain file's in
one pass over its bytes; a gzipped file's chunk by chunk), at the rates below."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Callable

from .. import memory
from ..errors import BadInput, read_error
from ..model.timeline import DEVICE_CATS

_PIECE = 1 << 20  # bytes counted at a time


# What one event costs at the peak of reading a trace (its record, the aggregates and the
# decoder's objects; the file is read a few MiB at a time, so its bytes are not held:
# measured 400-700 bytes on flat traces of 95-byte events and on a CPU training trace of
# 360-byte ones), with a margin; the plain parser's dictionaries cost about twice as
# much, with the whole file held. A trace whose events would not fit in the memory
# available is refused before it is decoded (a decoder that runs out of memory may crash
# the process rather than raise).
BYTES_PER_EVENT = 1024
# Read as columns (read_columns): measured 135 bytes an event on a CPU trace of 1.01 M
# events and 143 on one of 5.65 M, imports aside; device work, kept as decoded events too
# and read one by one by the launch, stream and critical-path analyses, 820 on a trace of
# 1 M kernels (2026-12-06). With margins.
BYTES_PER_COLUMN_EVENT = 256
BYTES_PER_DEVICE_EVENT = 1024
BYTES_PER_PLAIN_EVENT = 2048
# What reading takes beside the events, whatever the trace: the chunk being cut and
# decoded (8 MiB of bytes, its events' objects before they are sorted) and the module's
# own tables.
READ_CONSTANT = 64 << 20


# What a trace's events take once read, against the file's bytes, is at most about 26
# times (measured: tiny host events of a different name each, 1,444 bytes an event for 55
# bytes of file; 12 times with one name, under 1 for real traces). So a plain trace under
# 1/SMALL_FRACTION of the memory available fits whatever it holds, and its events are
# not counted first: counting a 350 MB file took 0.3 s, 7% of reading it.
SMALL_FRACTION = 48


# What the device's work is called in a trace (its "cat" values, quoted): read as columns,
# it is kept as decoded events too, and its analyses (the launches, the streams, the
# critical path) hold Python objects per kernel, so it counts at its own rate.
_DEVICE_NEEDLES = tuple(b'"' + cat.encode() + b'"' for cat in sorted(DEVICE_CATS))


def _counted(buf: Any, start: int, end: int) -> tuple[int, int]:
    """The events (their "ph" keys) in ``buf[start:end]``, and how many name a device
    category (an overcount where a name is one, which errs on the side of refusing)."""
    return (buf.count(b'"ph"', start, end),
            sum(buf.count(needle, start, end) for needle in _DEVICE_NEEDLES))


def _fits(path: Path, f: io.BufferedReader, per_event: int, per_device: int | None = None
          ) -> Callable[[Any, int, int], None] | None:
    """Refuse (BadInput, ``[too-big]``) a trace whose decoded events would not fit in
    memory: ``per_event`` bytes an event, ``per_device`` (as much, unless given) a piece
    of device work. Every event has a "ph" key: a plain file's are counted in one pass
    over its bytes, before any is decoded, unless the file is under 1/SMALL_FRACTION of
    the memory available. A gzipped file's cannot be without inflating it twice: the gate
    returned hears of each chunk (the buffer and the chunk's bounds) before that chunk is
    decoded, and refuses the trace once the events so far would not fit."""
    budget = memory.available()
    if budget is None:
        return None
    room = budget - READ_CONSTANT
    device_rate = per_device if per_device is not None else per_event

    def need(events: int, device: int) -> int:
        return events * per_event + device * (device_rate - per_event)

    def refuse(events: int, device: int, where: str) -> BadInput:
        rates = (f"{per_event:,} bytes each" if device_rate == per_event else
                 f"{per_event:,} bytes each, {device_rate:,} a piece of device work "
                 f"({device:,} of them)")
        return _too_big(path, f"{events:,} events{where}", need(events, device), rates,
                        budget)
    if f.read(2) == b"\x1f\x8b":
        f.seek(0)
        seen = [0, 0]

        def gate(buf: Any, start: int, end: int) -> None:
            events, device = _counted(buf, start, end)
            seen[0] += events
            seen[1] += device
            if need(*seen) > room:
                raise refuse(seen[0], seen[1], " in the first part of it")
        return gate
    try:
        small = os.fstat(f.fileno()).st_size * SMALL_FRACTION < room
    except OSError as exc:
        raise read_error(path, exc) from exc
    f.seek(0)
    if small:
        return None
    events, device = _count_events(path, f)
    f.seek(0)
    if need(events, device) > room:
        raise refuse(events, device, "")
    return None


def _too_big(path: Path, what: str, need: int, rates: str, budget: int) -> BadInput:
    return BadInput(f"{path}: {what} need about {need + READ_CONSTANT:,} bytes of memory to "
                    f"read ({rates} and {READ_CONSTANT >> 20} MiB), more "
                    f"than the {budget:,} available: refused (free memory, or cut the trace "
                    "to fewer steps)", error_id="too-big")


def _count_events(path: Path, f: io.BufferedReader) -> tuple[int, int]:
    """_counted over a plain file, read a piece at a time into one buffer, each piece after
    the end of the one before (so that a key cut between two pieces is counted once)."""
    keep = max(len(n) for n in (b'"ph"', *_DEVICE_NEEDLES)) - 1
    buf = bytearray(keep + _PIECE)
    tail = events = device = 0  # tail: bytes of the piece before, at the buffer's start
    try:
        while n := f.readinto(memoryview(buf)[tail:tail + _PIECE]):
            total = tail + n
            e, d = _counted(buf, 0, total)
            e0, d0 = _counted(buf, 0, tail)  # whole in the piece before: counted there
            events, device = events + e - e0, device + d - d0
            kept = min(keep, total)
            buf[:kept] = buf[total - kept:total]
            tail = kept
    except OSError as exc:
        raise read_error(path, exc) from exc
    return events, device
