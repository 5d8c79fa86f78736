"""Read Chrome traces written by torch.profiler (export_chrome_trace, tensorboard_trace_handler).

From the events alone, compute what ``key_averages()`` reports: per operator
name the calls, self and total CPU time (from the nesting of host events on
each thread), self and total device time (kernels attributed to the operator
that launched them, by External id, else through the runtime call with the
same correlation id), and memory (``[memory]`` events attributed to the
innermost operator on their thread). Works for torch 1.8 traces (``Operator``,
``Runtime``, ``Kernel``) to today's (``cpu_op``, ``cuda_runtime``, ``kernel``),
plain or gzipped. No torch import.

This module decodes (read_trace, read_columns, host_calls, read_trace_folder). A trace's
events go into columns (reporter.ingest.columns, reporter.model.columns), which
reporter.analyze.timeline_columns analyses; the runner's own traces, read with their
calls' inputs, go into the object record (trace_events, reporter.model.timeline), which
reporter.analyze.timeline analyses (nesting, attribution, memory, the step breakdown, the
critical path, FLOP costs, phases, compile facts, growing calls, communication); the two
give the same Profile. What reading may take, and the refusal, is budget's.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import importlib.util
import io
import json
import math
import os
import re
import zlib
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator

import msgspec

from .. import memory
from ..analyze.flops import FORMULAS, cost
from ..analyze.shapes import Call
from ..analyze.stragglers import stragglers
from ..errors import BadInput, read_error
from ..model.columns import Columns
from ..model.profile import Profile
from ..analyze.timeline import profile_of
from ..analyze.timeline_records import _EPS
from ..model.timeline import (
    DEVICE_ANNOTATION_CATS as DEVICE_ANNOTATION_CATS,
    DEVICE_CATS as DEVICE_CATS,
    HOST_CATS,
    OP_CATS,
    RUNTIME_CATS,
)
from .budget import (
    BYTES_PER_COLUMN_EVENT,
    BYTES_PER_DEVICE_EVENT,
    BYTES_PER_EVENT,
    BYTES_PER_PLAIN_EVENT,
    READ_CONSTANT,
    SMALL_FRACTION as SMALL_FRACTION,
    _fits,
    _too_big,
)
from .columns import columns_of, gather, join
from .trace_events import (
    _CallArgs,
    _CallEvent,
    _CostArgs,
    _CostEvent,
    _Event,
    _ShapeEvent,
    timeline_of,
)


# What a chunk is decoded as: events; with every input (shapes); with modelled ops' (costs).
PLAIN, SHAPES, COSTS, CALLS = 0, 1, 2, 3
RAW = 4  # a chunk not decoded: its bytes, a JSON array of whole events (for a worker process)
_DECODERS: dict[int, msgspec.json.Decoder[Any]] = {
             PLAIN: msgspec.json.Decoder(list[_Event]),
             SHAPES: msgspec.json.Decoder(list[_ShapeEvent]),
             COSTS: msgspec.json.Decoder(list[_CostEvent]),
             CALLS: msgspec.json.Decoder(list[_CallEvent])}
_NEEDLES = {name: b'"name": "' + name.encode() + b'"' for name in FORMULAS}


def _scan_costs(buf: Any, first: int, end: int, events: list[Any], memo: dict) -> bool:
    """The cost of each modelled operator's call in ``buf[first:end]``, into its decoded
    event (``events``, in the same order), read from the bytes of its args' input fields
    (torch writes "args", an object of scalars and lists, after the name; "Ev Idx" after
    the inputs). The same inputs repeat every step: ``memo`` maps their bytes to their
    cost. False when an event's name is not where torch's layout puts it: the caller
    then decodes the chunk with every input instead."""
    pos, find, needles = first, buf.find, _NEEDLES
    for e in events:
        needle = needles.get(e.name)
        if needle is None:
            continue
        at = find(needle, pos, end)
        if at < 0:
            return False
        pos = at + len(needle)
        a = e.args
        if type(a) is not _CostArgs or e.cat not in OP_CATS:
            continue  # no args, or an event _coerce parsed (its inputs are lists)
        start = find(b'"args"', pos, min(end, pos + 512))
        close = find(b"}", start, end) if start >= 0 else -1
        if close < 0:
            continue
        i = find(b'"Concrete Inputs"', start, close)
        if i < 0:
            i = find(b'"Input ', start, close)
            if i < 0:
                continue
        j = find(b'"Ev Idx"', i, close)
        region = bytes(buf[i:j if j >= 0 else close])
        key = (needle, region)
        found = memo.get(key)
        if found is None:
            found = memo[key] = _cost_at(e.name, region)
        a.computed = found
    return True


def _cost_at(name: str, region: bytes) -> Any:
    """The cost of a call from its args' input fields, or None."""
    try:
        args = msgspec.json.decode(b"{" + region.rstrip().rstrip(b",") + b"}")
    except msgspec.DecodeError:
        return None
    if not isinstance(args, dict):
        return None
    return cost(name, args.get("Input Dims") or args.get("Input dims"), args.get("Input type"),
                args.get("Concrete Inputs"))


def _number(value: Any) -> int | float | None:
    """A finite time; integers stay integers (nanosecond traces are told by them)."""
    if type(value) not in (int, float, str):
        return None  # bools, lists, None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(number):
        return None
    return value if type(value) is int else number


def _coerce(events: list[Any]) -> list[_Event]:
    """Events parsed as plain JSON (an odd file, or a chunk with an odd event),
    checked one by one: what is not an event we read is left out."""
    out: list[_Event] = []
    for e in events:
        if not isinstance(e, dict):
            continue
        ph, name, cat = e.get("ph"), e.get("name"), e.get("cat", "")
        ts, dur = _number(e.get("ts")), _number(e.get("dur", 0))
        if ph not in ("X", "i") or type(name) is not str or type(cat) is not str \
                or ts is None or dur is None:
            continue
        args = e.get("args")
        if isinstance(args, dict):
            args = _CallArgs(ext=_id(args.get("External id")),
                              ext_old=_id(args.get("external id")),
                              corr=_id(args.get("correlation")), nbytes=args.get("Bytes"),
                              device_type=args.get("Device Type"),
                              addr=args.get("Addr"), total=args.get("Total Allocated"),
                              seq=args.get("Sequence number"), copied=args.get("bytes"),
                              dims=args.get("Input Dims"),
                              dims_old=args.get("Input dims"), types=args.get("Input type"),
                              concrete=args.get("Concrete Inputs"),
                              strides=args.get("Input Strides"))
        else:
            args = None
        out.append(_ShapeEvent(ph=ph, cat=cat, name=name, pid=_id(e.get("pid")),
                               tid=_id(e.get("tid")), ts=ts, dur=dur, args=args))
    return out


def _id(value: Any) -> int | float | str | None:
    return value if type(value) in (int, float, str) else None


_PIECE = 1 << 20  # bytes read (or inflated) at a time
_GZIP_PIECE = 1 << 20


def _pieces(path: Path, f: BinaryIO) -> Iterator[bytes]:
    """The file's bytes (gunzipped), a few MiB at a time: the reader never holds the whole
    file, so that reading a trace takes memory for its events, not for its bytes."""
    if f.read(2) == b"\x1f\x8b":
        f.seek(0)
        yield from _gunzip_pieces(path, f)
        return
    f.seek(0)
    try:
        while piece := f.read(_PIECE):
            yield piece
    except OSError as exc:
        raise read_error(path, exc) from exc


def _read_whole(path: Path) -> bytes:
    """The whole file's bytes, gunzipped: for the plain parser only."""
    try:
        with open(path, "rb") as f:
            if f.read(2) == b"\x1f\x8b":
                f.seek(0)
                return bytes(_gunzip(path, f))
            f.seek(0)
            return f.read()
    except OSError as exc:
        raise read_error(path, exc) from exc


# A gzipped trace inflates about 10 times (JSON of kernel names and numbers); one that
# inflates far more is mostly padding, a decompression bomb: refused once it is past
# _BOMB_MIN bytes, before it fills the memory.
_BOMB_MIN = 64 << 20
_MAX_RATIO = 100


def _max_ratio() -> float:
    try:
        return float(os.environ.get("REPORTER_MAX_INFLATE_RATIO", _MAX_RATIO))
    except ValueError:
        return _MAX_RATIO


def _gunzip_pieces(path: Path, f: BinaryIO) -> Iterator[bytes]:
    """The inflated bytes a piece at a time (at most _PIECE each). A stream that inflates
    more than REPORTER_MAX_INFLATE_RATIO times is refused as a decompression bomb once
    it is past _BOMB_MIN bytes."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    read, out, limit = 0, 0, _max_ratio()
    try:
        while piece := f.read(_GZIP_PIECE):
            read += len(piece)
            while piece:
                # A bounded amount of output at a time, so that a bomb is caught early.
                data = inflate.decompress(piece, _PIECE)
                out += len(data)
                if out > _BOMB_MIN and out > limit * read:
                    raise BadInput(
                        f"{path}: {read:,} gzipped bytes inflate to over {out:,}, more "
                        f"than {limit:g} times: refused as a decompression bomb (set "
                        "REPORTER_MAX_INFLATE_RATIO to read it anyway)", error_id="bad-trace")
                if data:
                    yield data
                if inflate.unconsumed_tail:
                    piece = inflate.unconsumed_tail
                elif inflate.eof and inflate.unused_data:  # another gzip member follows
                    piece = inflate.unused_data
                    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                else:
                    piece = b""
    except zlib.error as exc:
        raise BadInput(f"{path}: the gzip stream is damaged ({exc})",
                       error_id="bad-trace") from exc
    except OSError as exc:
        raise read_error(path, exc) from exc
    if not inflate.eof:
        raise BadInput(f"{path}: the gzip stream is cut off", error_id="bad-trace")


def _gunzip(path: Path, f: BinaryIO) -> bytearray:
    """The whole inflated file (the plain parser's input), refused once it is past half
    the memory available: parsing it takes more than its bytes."""
    out = bytearray()
    budget = memory.available()
    room = budget // 2 if budget is not None else None
    for data in _gunzip_pieces(path, f):
        out += data
        if room is not None and len(out) > room:
            raise BadInput(
                f"{path} inflates to over {len(out):,} bytes, more than the memory "
                f"available can decode ({budget:,} bytes free): refused",
                error_id="too-big")
    return out


_EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_OBJECT_START = re.compile(rb"\s*\{")
_LIST_START = re.compile(rb"\s*\[")
_CHUNK = 8 << 20
_TAIL = 64 << 10  # what is left for the plain parser at the end of the events


class _NotChunkable(Exception):
    """The fast path met something it cannot cut safely: start again with the plain parser."""


_HEAD_MAX = 64 << 20  # the top-level fields before traceEvents, at most


def _chunked_events(path: Path, pieces: Iterator[bytes], meta: dict[str, Any], mode: int,
                    gate: Callable[[Any, int, int], None] | None = None
                    ) -> Iterator[Any]:
    """The traceEvents array a few MiB at a time, read from ``pieces`` (the file's bytes
    in order, _pieces); fills ``meta`` with the other fields.

    Each chunk is cut where one event object ends and the next begins, and is
    decoded on its own; a cut inside an event cannot parse (its brackets do not
    balance), so such a failure raises _NotChunkable. A chunk that parses but
    holds an event of an unexpected shape is read again as plain JSON, event by
    event. Only the chunk being cut is held, never the whole file: what the reader holds
    is its events and a constant. ``gate``, when given, hears of each chunk's events
    (its ``"ph"`` keys) before the chunk is decoded, and may refuse them (BadInput).
    """
    decoder = _DECODERS[PLAIN if mode == RAW else mode]  # RAW: not used (no decoding here)
    memo: dict = {}
    # One buffer for the whole file, allocated once: a chunk and a few pieces. It grows
    # only for an event longer than a chunk; what was decoded is let go of by moving the
    # rest (under a piece and an event) to its front.
    buf = bytearray(_CHUNK + 4 * _PIECE)
    filled = 0
    eof = False

    def more() -> None:
        nonlocal eof, filled, buf
        piece = next(pieces, None)
        if piece is None:
            eof = True
            return
        if filled + len(piece) > len(buf):
            buf += bytes(max(len(piece), len(buf)))
        buf[filled:filled + len(piece)] = piece
        filled += len(piece)

    while True:
        bare = _LIST_START.match(buf, 0, filled)  # the legacy form: a bare list of events
        start = bare or _EVENTS_START.search(buf, 0, filled)
        if start is not None or eof or filled > _HEAD_MAX:
            break
        more()
    if start is None or not (bare or _OBJECT_START.match(buf, 0, filled)):
        raise _NotChunkable
    head = bytes(buf[:start.start()]).rstrip().rstrip(b",")
    try:
        if not bare and head.strip() != b"{":
            meta.update(msgspec.json.decode(head + b"}"))
        pos, step = start.end(), _CHUNK  # pos: just after the "[" or "," before an event
        while True:
            if not eof and filled < pos + step + _PIECE:
                more()
                continue
            cut = _BOUNDARY.search(buf, pos + step, filled)
            if cut is None:
                if not eof:
                    more()
                    continue
                if step <= _TAIL:
                    break
                step //= 16  # near the end: smaller chunks, so that the plain tail is short
                continue
            end = cut.start() + 1
            if gate is not None:
                gate(buf, pos, end)
            if mode == RAW:
                yield b"[" + bytes(buf[pos:end]) + b"]"
            else:
                with memoryview(buf) as view:
                    events = _decode_chunk(buf, view, pos, end, decoder)
                    if mode == COSTS and not _scan_costs(buf, pos, end, events, memo):
                        events = _decode_chunk(buf, view, pos, end, _DECODERS[SHAPES])
                yield events
            # Keep the separator before the next event and what follows it.
            keep = filled - (cut.end() - 2)
            buf[:keep] = buf[cut.end() - 2:filled]
            pos, filled = 1, keep
        # The rest: the last events, the array's end, then the other top-level fields.
        if gate is not None:
            gate(buf, pos, filled)
        text = "[" + buf[pos:filled].decode("utf-8")
        del buf
        last, end = json.JSONDecoder().raw_decode(text)
        tail = text[end:].strip()
        if bare:
            if tail:
                raise _NotChunkable
        elif tail.startswith(","):
            meta.update(msgspec.json.decode("{" + tail[1:]))
        elif tail != "}":
            raise _NotChunkable
    except (ValueError, UnicodeDecodeError, RecursionError, msgspec.DecodeError) as exc:
        raise _NotChunkable from exc
    yield _coerce(last)


def _decode_chunk(buf: Any, view: memoryview, first: int, end: int,
                  decoder: msgspec.json.Decoder) -> list[_Event]:
    """The events in ``buf[first:end]`` (objects and the commas between them).

    The byte before ``first`` and the one at ``end`` are the array's "[" or a
    separator (a comma or white space). While the chunk is decoded they are set
    to "[" and "]", which makes it a JSON array without copying it, and then
    put back."""
    before, after = buf[first - 1], buf[end]
    buf[first - 1], buf[end] = 0x5B, 0x5D
    try:
        chunk = view[first - 1:end + 1]
        try:
            return decoder.decode(chunk)
        except msgspec.ValidationError:  # an event of an odd shape: read them one by one
            return _coerce(msgspec.json.decode(chunk))
    finally:
        buf[first - 1], buf[end] = before, after


def _whole_events(path: Path, raw: bytes, meta: dict[str, Any]) -> Iterator[list[_Event]]:
    """The plain parser: the whole document at once, with clear errors."""
    try:
        doc = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path} is not valid JSON: not UTF-8 at byte {exc.start}",
                       error_id="bad-trace") from exc
    except ValueError as exc:  # "Expecting value: line 1 column 18 (char 17)", 5,000 digits
        raise BadInput(f"{path} is not valid JSON: {exc}", error_id="bad-trace") from exc
    except RecursionError as exc:
        raise BadInput(f"{path}: JSON nested too deeply", error_id="bad-trace") from exc
    if isinstance(doc, list):
        yield _coerce(doc)
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise BadInput(f"{path} is JSON but not a Chrome trace (no traceEvents list)",
                       error_id="bad-trace")
    events = doc.pop("traceEvents")
    meta.update(doc)
    yield _coerce(events)


@contextmanager
def _gc_paused():
    """Building millions of small objects makes the cyclic GC rescan them again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def profile_from_events(chunks: Iterable[list[_Event]], meta: dict[str, Any],
                        shapes: bool = False, costs: bool = False) -> Profile:
    """Aggregate a trace's events, given as lists of events; ``meta`` holds the
    trace's other top-level fields once ``chunks`` is exhausted. With ``shapes``,
    also group operators by input shape (``ops_by_shape``), as
    ``key_averages(group_by_input_shape=True)`` does; with ``costs``, sum the FLOPs and
    bytes of the operators reporter.analyze.flops models (``Profile.costs``)."""
    with _gc_paused():
        return profile_of(timeline_of(chunks, meta), shapes, costs)


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(64)
    except OSError:
        return b""


def is_gzip(path: Path) -> bool:
    return _head(path)[:2] == b"\x1f\x8b"


def is_trace(path: Path) -> bool:
    """Whether a file may be a trace (gzip, or JSON's first character); the reader decides."""
    head = _head(path)
    return head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"[")


def read_trace(path: Path, shapes: bool = False, costs: bool = True) -> Profile:
    """The Profile of one trace file; ``shapes`` also groups by input shape; ``costs``
    sums the modelled operators' FLOPs and bytes (reporter.analyze.flops).

    The trace is read as columns (read_columns) and analysed on them
    (reporter.analyze.timeline_columns), in memory bounded by the columns; with ``shapes``
    (the runner's own traces, whose every call's inputs are kept) as objects
    (read_trace_objects)."""
    if shapes:
        return read_trace_objects(path, shapes=True, costs=costs)
    from ..analyze.timeline_columns import profile_of_columns

    cols = read_columns(path, costs)
    with _gc_paused():
        return _named(path, profile_of_columns(cols, costs), cols.meta)


def read_trace_objects(path: Path, shapes: bool = False, costs: bool = True) -> Profile:
    """read_trace's Profile from the trace's events as objects
    (reporter.analyze.timeline.profile_of): for ``shapes``, and the reference the columns'
    reading is checked against."""
    meta: dict[str, Any] = {}
    mode = SHAPES if shapes else COSTS if costs else PLAIN
    try:
        with _opened(path) as f:
            gate = _fits(path, f, BYTES_PER_EVENT)
            profile = profile_from_events(_chunked_events(path, _pieces(path, f), meta, mode,
                                                          gate), meta, shapes, costs)
    except _NotChunkable:
        meta = {}
        raw = _whole_checked(path)
        profile = profile_from_events(_whole_events(path, raw, meta), meta, shapes, costs)
    return _named(path, profile, meta)


def _named(path: Path, profile: Profile, meta: dict[str, Any]) -> Profile:
    """The profile labelled with its rank (or file name) and stamped with today's
    timeline code; refused where the trace names no valid rank or holds no events."""
    info = meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if rank is not None and (type(rank) is not int or not 0 <= rank < 1 << 20):
        raise BadInput(f"{path}: distributedInfo.rank is {str(rank)[:40]!r}, not a rank number",
                       error_id="bad-trace")
    profile.label = f"rank {rank}" if rank is not None else path.name
    profile.timeline = timeline_stamp()
    if not profile.ops:
        raise BadInput(f"{path}: a Chrome trace without profiler events (no cpu_op, "
                       "runtime or kernel events)", error_id="bad-trace")
    return profile


def part_of(chunk: bytes, costs: bool) -> Any:
    """A chunk's columns (reporter.ingest.columns.gather), from its bytes (a JSON array of
    whole events, as RAW cuts it): what a worker process of read_trace_with makes."""
    decoder = _DECODERS[COSTS if costs else PLAIN]
    try:
        events = decoder.decode(chunk)
    except msgspec.ValidationError:  # an event of an odd shape: read them one by one
        events = _coerce(msgspec.json.decode(chunk))
    if costs and not _scan_costs(chunk, 1, len(chunk) - 1, events, _WORKER_MEMO):
        try:
            events = _DECODERS[SHAPES].decode(chunk)
        except msgspec.ValidationError:
            events = _coerce(msgspec.json.decode(chunk))
    return gather(events)


_WORKER_MEMO: dict = {}  # a worker's costs by their inputs' bytes (_scan_costs)


def read_trace_with(path: Path, costs: bool,
                    parts: Callable[[Iterator[Any]], Iterator[Any]]) -> Profile:
    """read_trace's reading as columns where ``parts`` turns the chunks (each the bytes of
    a JSON array of events, part_of's input, or, for the last events, a list of decoded
    events) into their parts, in order: a pool of worker processes
    (reporter.ingest.ranks). A trace the chunks cannot be cut from, or one a chunk of which
    does not decode, is read by read_trace in this process."""
    from ..analyze.timeline_columns import profile_of_columns

    meta: dict[str, Any] = {}
    try:
        with _opened(path) as f:
            gate = _fits(path, f, BYTES_PER_COLUMN_EVENT, BYTES_PER_DEVICE_EVENT)
            with _gc_paused():
                cols = join(parts(_chunked_events(path, _pieces(path, f), meta, RAW, gate)),
                            meta)
    except (_NotChunkable, msgspec.DecodeError):
        return read_trace(path, costs=costs)
    with _gc_paused():
        return _named(path, profile_of_columns(cols, costs), meta)


def read_columns(path: Path, costs: bool = True) -> Columns:
    """One trace file read as columns (reporter.ingest.columns), chunk by chunk, with the
    modelled operators' costs unless ``costs`` is false; refused (BadInput) as read_trace
    refuses it, its events counted at BYTES_PER_COLUMN_EVENT."""
    meta: dict[str, Any] = {}
    try:
        with _opened(path) as f:
            gate = _fits(path, f, BYTES_PER_COLUMN_EVENT, BYTES_PER_DEVICE_EVENT)
            with _gc_paused():
                return columns_of(_chunked_events(path, _pieces(path, f), meta,
                                                  COSTS if costs else PLAIN, gate), meta)
    except _NotChunkable:
        meta = {}
        raw = _whole_checked(path)
        with _gc_paused():
            return columns_of(_whole_events(path, raw, meta), meta)


# The modules whose code turns a trace's events into a Profile's timeline analyses (the
# step breakdown, critical path, compile facts, FLOP costs, calls read one by one): their
# source, hashed, stamps each profile read from a trace (Profile.timeline).
TIMELINE_CODE = ("reporter.ingest.traces", "reporter.ingest.trace_events",
                 "reporter.ingest.columns", "reporter.model.columns",
                 "reporter.analyze.timeline_columns",
                 "reporter.model.timeline", "reporter.analyze.timeline",
                 "reporter.analyze.timeline_records", "reporter.analyze.timeline_costs",
                 "reporter.analyze.breakdown", "reporter.analyze.critical_path",
                 "reporter.analyze.compiled", "reporter.analyze.flops",
                 "reporter.analyze.shapes")


@functools.cache
def timeline_stamp() -> str:
    """A stamp of today's timeline code: the hash of TIMELINE_CODE's source. Any change
    to it gives another stamp, so that a stored run read by other code is read again
    (reporter.inputs.load_run); where a module's source cannot be read, its name and
    reporter's version stand for it."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256()
    for name in TIMELINE_CODE:
        spec = importlib.util.find_spec(name)
        try:
            h.update(Path(spec.origin).read_bytes())  # type: ignore[union-attr, arg-type]
        except (OSError, TypeError, AttributeError):
            try:
                h.update(f"{name} {version('reporter')}".encode())
            except PackageNotFoundError:
                h.update(name.encode())
    return h.hexdigest()[:16]


@contextmanager
def _opened(path: Path) -> Iterator[io.BufferedReader]:
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise read_error(path, exc) from exc
    with f:
        yield f


def _whole_checked(path: Path) -> bytes:
    """The whole file for the plain parser, once its events are known to fit."""
    budget = memory.available()
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise read_error(path, exc) from exc
    if budget is not None and size > budget // 2:
        raise _too_big(path, f"{size:,} bytes", size, f"{BYTES_PER_PLAIN_EVENT:,} bytes each",
                       budget)
    raw = _read_whole(path)
    budget = memory.available()
    if budget is not None:
        events = raw.count(b'"ph"')
        need = events * BYTES_PER_PLAIN_EVENT + len(raw)
        if need + READ_CONSTANT > budget:
            raise _too_big(path, f"{events:,} events", need,
                           f"{BYTES_PER_PLAIN_EVENT:,} bytes each", budget)
    return raw


def host_calls(path: Path) -> list[Call]:
    """The operators the host called, in order on each thread, each with its inputs (shapes,
    strides, types, concrete values) and the index of the call that encloses it: the
    sequence the aggregated profile does not keep (which call's output the next one read).
    Read from the runner's own trace, for the replacements it times. Runtime calls (kernel
    launches, inside the operators) are left out."""
    wanted = HOST_CATS - RUNTIME_CATS
    meta: dict[str, Any] = {}
    threads: dict[Any, list[Any]] = defaultdict(list)
    try:
        with _opened(path) as f:
            gate = _fits(path, f, BYTES_PER_EVENT)
            for events in _chunked_events(path, _pieces(path, f), meta, CALLS, gate):
                for e in events:
                    if e.ph == "X" and e.cat in wanted:
                        threads[(e.pid, e.tid)].append(e)
    except _NotChunkable:
        threads.clear()
        raw = _whole_checked(path)
        for events in _whole_events(path, raw, meta):
            for e in events:
                if e.ph == "X" and e.cat in wanted:
                    threads[(e.pid, e.tid)].append(e)
    calls: list[Call] = []
    for thread, evs in enumerate(threads.values()):
        evs.sort(key=lambda e: (e.ts, -e.dur))
        stack: list[int] = []
        for e in evs:
            end = e.ts + max(e.dur, 0)
            while stack and calls[stack[-1]].end <= e.ts + _EPS:
                stack.pop()
            if stack and end > calls[stack[-1]].end + _EPS:
                stack.clear()  # overlapping but not nested: a new top level
            a = e.args
            strides = getattr(a, "strides", None) if a is not None else None
            calls.append(Call(
                name=e.name, thread=thread, start=e.ts, end=end,
                parent=stack[-1] if stack else None, op=e.cat in OP_CATS,
                dims=(a.dims if a.dims is not None else a.dims_old) if a is not None else None,
                strides=strides, types=a.types if a is not None else None,
                concrete=a.concrete if a is not None else None,
                seq=a.seq if a is not None and type(a.seq) is int else None))
            stack.append(len(calls) - 1)
    return calls


TRACE_SUFFIXES = (".json", ".json.gz")


# A folder of more traces than this is refused before any is read: each becomes a section
# of the report (a rank each), and a report of hundreds of them is no use to read.
MAX_TRACE_FILES = 256


def read_trace_folder(folder: Path, costs: bool = True,
                      progress: Callable[[str], None] | None = None) -> list[Profile]:
    """One profile per trace file in a folder (per-rank traces), ordered by rank or name;
    ``costs`` as for read_trace; ``progress`` hears of each file of a folder of many. In
    this process, one file after another (reporter.ingest.ranks reads them in parallel)."""
    files = rank_files(folder)
    profiles = []
    for i, p in enumerate(files, 1):
        if progress is not None and len(files) > PROGRESS_FILES:
            progress(f"reading trace {i}/{len(files)}: {p.name}")
        profiles.append(read_trace(p, costs=costs))
    return merge_ranks(profiles)


# A folder of more traces than this has a progress line per file read (one every 2 seconds
# at most: reporter.inputs).
PROGRESS_FILES = 16


def rank_files(folder: Path) -> list[Path]:
    """The trace files of a folder of per-rank traces, sorted by name; refused (one line)
    when there are none or more than MAX_TRACE_FILES."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                   and p.name != "run.json")
    if not files:
        raise BadInput(f"{folder}: no run.json and no Chrome traces (*.json, *.json.gz)",
                       error_id="bad-input")
    if len(files) > MAX_TRACE_FILES:
        raise BadInput(f"{folder} holds {len(files):,} traces, over the limit of "
                       f"{MAX_TRACE_FILES}: analyze a folder of the ranks you want to see",
                       error_id="bad-input")
    return files


def merge_ranks(profiles: list[Profile]) -> list[Profile]:
    """The ranks' profiles (one per file, in the files' order) ordered by rank, then by
    name, with the stragglers across them on the first."""
    def order(p: Profile):
        label = p.label
        return (0, int(label.split()[1])) if label.startswith("rank ") else (1, label)
    profiles = sorted(profiles, key=order)
    profiles[0].stragglers = stragglers(profiles)
    return profiles
