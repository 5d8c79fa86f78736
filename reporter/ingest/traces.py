"""Read Chrome traces written by torch.profiler (export_chrome_trace, tensorboard_trace_handler).

From the events alone, compute what ``key_averages()`` reports: per operator
name the calls, self and total CPU time (from the nesting of host events on
each thread), self and total device time (kernels attributed to the operator
that launched them, by External id, else through the runtime call with the
same correlation id), and memory (``[memory]`` events attributed to the
innermost operator on their thread). Works for torch 1.8 traces (``Operator``,
``Runtime``, ``Kernel``) to today's (``cpu_op``, ``cuda_runtime``, ``kernel``),
plain or gzipped. No torch import.
"""

from __future__ import annotations

import gc
import io
import json
import math
import os
import re
import sys
import zlib
from bisect import bisect_right
from collections import defaultdict
from contextlib import contextmanager
from operator import attrgetter
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Optional, Union

import msgspec

from .. import memory
from ..analyze.breakdown import MODULE_MARK, overlap, step_breakdown, union
from ..analyze.compiled import (
    BACKWARD,
    CACHE_LOOKUP,
    FORWARD,
    GENERATED,
    GRAPH_LAUNCHES,
    REGION,
    UNNAMED_TRITON,
)
from ..analyze.critical_path import critical_path
from ..analyze.flops import FORMULAS, MATRIX, cost, modelled
from ..analyze.shapes import Call
from ..analyze.stragglers import stragglers
from ..errors import BadInput, read_error
from ..model import device as devices
from ..model.profile import (
    KIND_ANNOTATION,
    KIND_DEVICE_ANNOTATION,
    KIND_KERNEL,
    KIND_OP,
    KIND_RUNTIME,
    Breakdown,
    Op,
    OpCalls,
    Profile,
    classify,
)

# Host events that nest on a thread and count as CPU time, like key_averages' events.
HOST_CATS = {"cpu_op", "Operator", "user_annotation", "cuda_runtime", "Runtime",
             "cuda_driver", "Driver", "xpu_runtime", "mtia_runtime", "privateuse1_runtime"}
RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "Driver", "xpu_runtime",
                "mtia_runtime", "privateuse1_runtime"}
# Device work: kernels, copies and sets (AMD traces use the same categories).
DEVICE_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset",
               "mtia_ccp_events"}
DEVICE_ANNOTATION_CATS = {"gpu_user_annotation"}
OP_CATS = {"cpu_op", "Operator"}
_EPS = 1e-3  # microseconds of slack when deciding whether one event encloses another


# What aggregation reads of an event. msgspec decodes these fields and skips the
# rest of each event (most of its bytes: input types, strides, concrete inputs)
# without building Python objects for it, which is most of the cost of reading
# a trace with a general JSON parser.
# Ids and thread keys index dicts: anything but a scalar sends the chunk to _coerce.
_Id = Union[int, float, str, None]


class _Args(msgspec.Struct, gc=False):
    ext: _Id = msgspec.field(name="External id", default=None)
    ext_old: _Id = msgspec.field(name="external id", default=None)  # torch 1.8
    corr: _Id = msgspec.field(name="correlation", default=None)
    nbytes: Any = msgspec.field(name="Bytes", default=None)  # [memory] events
    device_type: Any = msgspec.field(name="Device Type", default=None)
    addr: Any = msgspec.field(name="Addr", default=None)  # [memory] events
    total: Any = msgspec.field(name="Total Allocated", default=None)  # [memory] events
    seq: Any = msgspec.field(name="Sequence number", default=None)  # autograd's, fwd <-> bwd
    copied: Any = msgspec.field(name="bytes", default=None)  # gpu_memcpy events: bytes copied


class _ShapeArgs(_Args, gc=False):
    dims: Any = msgspec.field(name="Input Dims", default=None)
    dims_old: Any = msgspec.field(name="Input dims", default=None)
    types: Any = msgspec.field(name="Input type", default=None)
    concrete: Any = msgspec.field(name="Concrete Inputs", default=None)


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: _Id = None
    tid: _Id = None
    ts: Union[int, float] = 0
    dur: Union[int, float] = 0
    args: Optional[_Args] = None


class _ShapeEvent(_Event, gc=False):
    args: Optional[_ShapeArgs] = None


# The host's calls in order, with their inputs' strides too (host_calls): a view made by
# expand has a stride of 0 where it broadcasts.
class _CallArgs(_ShapeArgs, gc=False):
    strides: Any = msgspec.field(name="Input Strides", default=None)


class _CallEvent(_Event, gc=False):
    args: Optional[_CallArgs] = None


# Costs need the inputs of the operators reporter.analyze.flops models only. Parsing every
# event's inputs would double the time of reading a trace: events are decoded without
# them, and _scan_costs reads the modelled operators' inputs from the chunk's bytes.
class _CostArgs(_Args, gc=False):
    # Set by _scan_costs (no trace has this key): the call's flops.Cost or None.
    computed: Any = msgspec.field(name="reporter: computed", default=None)


class _CostEvent(_Event, gc=False):
    args: Optional[_CostArgs] = None


# What a chunk is decoded as: events; with every input (shapes); with modelled ops' (costs).
PLAIN, SHAPES, COSTS, CALLS = 0, 1, 2, 3
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
                    gate: Callable[[int], None] | None = None) -> Iterator[list[_Event]]:
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
    decoder = _DECODERS[mode]
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
                gate(buf.count(b'"ph"', pos, end))
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
            gate(buf.count(b'"ph"', pos, filled))
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


class _Agg:
    """Per-name sums, the same fields as one key_averages() row."""

    __slots__ = ("name", "kind", "calls", "self_cpu", "cpu_total", "self_dev", "dev_total",
                 "cpu_mem", "self_cpu_mem", "dev_mem", "self_dev_mem")

    def __init__(self, name: str, kind: str):
        self.name, self.kind = name, kind
        self.calls = 0
        self.self_cpu = self.cpu_total = self.self_dev = self.dev_total = 0.0
        self.cpu_mem = self.self_cpu_mem = self.dev_mem = self.self_dev_mem = 0

    def add(self, dur: float, child: float, self_dev: float, dev_total: float,
            mem: list | None) -> None:
        self.calls += 1
        self.cpu_total += dur
        self.self_cpu += dur - child if dur > child else 0.0
        self.self_dev += self_dev
        self.dev_total += dev_total
        if mem is not None:
            self.self_cpu_mem += mem[0]
            self.cpu_mem += mem[1]
            self.self_dev_mem += mem[2]
            self.dev_mem += mem[3]


def profile_from_events(chunks: Iterable[list[_Event]], meta: dict[str, Any],
                        shapes: bool = False, costs: bool = False) -> Profile:
    """Aggregate a trace's events, given as lists of events; ``meta`` holds the
    trace's other top-level fields once ``chunks`` is exhausted. With ``shapes``,
    also group operators by input shape (``ops_by_shape``), as
    ``key_averages(group_by_input_shape=True)`` does; with ``costs``, sum the FLOPs and
    bytes of the operators reporter.analyze.flops models (``Profile.costs``)."""
    with _gc_paused():
        return _aggregate(chunks, meta, shapes, costs)


_by_ts, _by_dur = attrgetter("ts"), attrgetter("dur")

# Fields of a host record (a list, for speed): its name's sums (_Agg), parent
# record, time in children, self device time, total device time, memory [self
# cpu, total cpu, self device, total device] or None, end, duration, number of
# children, merged into its parent, the event, its flops.Cost (None: not modelled; False:
# modelled, but an operator inside it carries the cost), inside a modelled operator, the
# phase it runs under (PHASES).
(_AGG, _PARENT, _CHILD, _SDEV, _TDEV, _MEM, _END, _DUR, _NCHILD, _MERGED, _EVENT, _COST,
 _INSIDE, _PHASE) = range(14)


_FLOAT_MAX = sys.float_info.max  # a time beyond it (or not finite) is left out with its event


def _aggregate(chunks: Iterable[list[_Event]], meta: dict[str, Any], shapes: bool,
               costs: bool = False) -> Profile:
    threads: dict[Any, list[_Event]] = {}  # (pid, tid) -> host events
    device: list[_Event] = []  # kernels, copies, sets
    device_ann: list[_Event] = []  # gpu_user_annotation
    py_modules: list[_Event] = []  # python_function "nn.Module: ..." events
    # (pid, tid) -> [(ts, bytes, device type, address, the device's total allocated)]
    memory: dict[Any, list] = defaultdict(list)
    host, dev_cats, dev_ann = HOST_CATS, DEVICE_CATS, DEVICE_ANNOTATION_CATS
    last_pid = last_tid = thread = None
    big, low = _FLOAT_MAX, -_FLOAT_MAX
    for events in chunks:
        for e in events:
            ph = e.ph
            if not (low <= e.ts <= big and low <= e.dur <= big):
                continue  # a time no float holds (400 digits), or not finite: left out
            if ph == "X":
                cat = e.cat
                if cat in host:
                    # Events come in runs from one thread: look its list up once per run.
                    if thread is None or e.tid != last_tid or e.pid != last_pid:
                        last_pid, last_tid = e.pid, e.tid
                        thread = threads.get((last_pid, last_tid))
                        if thread is None:
                            thread = threads[(last_pid, last_tid)] = []
                    thread.append(e)
                elif cat in dev_cats:
                    device.append(e)
                elif cat in dev_ann:
                    device_ann.append(e)
                elif cat == "python_function" and e.name.startswith("nn.Module: "):
                    py_modules.append(e)  # with_stack traces: module calls
            elif ph == "i" and e.name == "[memory]" and e.args is not None:
                a = e.args
                try:
                    nbytes, device_type = int(a.nbytes), int(a.device_type or 0)
                except (TypeError, ValueError, OverflowError):
                    continue  # a malformed memory event
                # where it was allocated and the allocator's total: for _peak_live only
                memory[(e.pid, e.tid)].append(
                    (e.ts, nbytes, device_type, _count(a.addr), _count(a.total)))
    # Kineto's nanosecond mode writes integer ns and says so; everything else is in us.
    first = next((evs[0] for evs in threads.values()), device[0] if device else None)
    int_ts = first is not None and type(first.ts) is int
    scale = 1e-3 if meta.get("displayTimeUnit") == "ns" and int_ts else 1.0

    facts_of: dict[str, dict[str, tuple]] = defaultdict(dict)  # cat -> name -> facts
    aggs: dict[tuple[str, str], _Agg] = {}
    comm_of: dict[str, int] = {}  # name -> 1 collective work, 2 collective call, 0 neither
    comm_work: list[tuple[float, float]] = []
    comm_calls: list[tuple[float, float]] = []
    # Device attribution needs every operator's ids; a trace without kernels does not.
    by_ext: dict[Any, list] | None = {} if device else None  # External id -> host record
    correlation_rt: dict[Any, list] = {}  # correlation id -> runtime record
    records: list[list] = []
    costed: list[list] = []  # records with a cost
    host_allocs: list[tuple] = []  # the host's allocations and frees, with their operators
    steps = 0
    step_ranges: list[tuple[float, float]] = []
    eps = _EPS / scale
    for key, evs in threads.items():
        # By start, and at equal starts the longer (enclosing) event first. Kineto
        # writes a thread's events nearly in order, which one sort on the start
        # time (floats) takes in linear time; only when starts tie, which integer
        # microseconds make likely, sort again with the duration as second key.
        evs.sort(key=_by_ts)
        starts = list(map(_by_ts, evs))
        if len(set(starts)) != len(starts):
            evs.sort(key=_by_dur, reverse=True)
            evs.sort(key=_by_ts)
        del starts
        mems = sorted(memory.pop(key, []))
        mi, n_mems = 0, len(mems)
        next_mem = mems[0][0] if mems else None
        stack: list[list] = []
        first_of_thread = len(records)
        for e in evs:
            ts, dur = e.ts, e.dur
            if dur < 0:
                dur = 0
            end = ts + dur
            while next_mem is not None and next_mem < ts:
                _charge_memory(stack, mems[mi], host_allocs)
                mi += 1
                next_mem = mems[mi][0] if mi < n_mems else None
            while stack and stack[-1][_END] <= ts + eps:  # _pop, inlined in the hot loop
                top = stack.pop()
                if top[_MEM] is not None:
                    _closed(top)
            parent = None
            if stack:
                if end <= stack[-1][_END] + eps:
                    parent = stack[-1]
                else:
                    while stack:  # overlapping but not nested: close what is open
                        _pop(stack)
            # What a (category, name) is, decided once: its row, whether it is a
            # collective, whether it is a step, whether it is a runtime call.
            names = facts_of[e.cat]
            facts = names.get(e.name)
            if facts is None:
                facts = names[e.name] = _facts(e.name, e.cat, aggs, comm_of)
            agg, c, is_step, runtime, formula, phase = facts
            if c:
                (comm_work if c == 1 else comm_calls).append((ts, end))
            if is_step:
                steps += 1
                step_ranges.append((ts, end))
            if parent is None:
                rec = [agg, None, 0.0, 0.0, 0.0, None, end, dur, 0, False, e, None, False,
                       phase]
            else:
                rec = [agg, parent, 0.0, 0.0, 0.0, None, end, dur, 0, False, e, None,
                       parent[_INSIDE] or bool(parent[_COST]), phase or parent[_PHASE]]
            records.append(rec)
            if costs and formula and e.args is not None and _cost_of(rec, e.args):
                costed.append(rec)
            if parent is not None:
                parent[_CHILD] += dur
                parent[_NCHILD] += 1
            stack.append(rec)
            if by_ext is not None and e.args is not None:
                if runtime:
                    if e.args.corr is not None:
                        correlation_rt[e.args.corr] = rec
                else:
                    ext = e.args.ext if e.args.ext is not None else e.args.ext_old
                    if ext is not None:
                        by_ext[ext] = rec
        while mi < n_mems:
            _charge_memory(stack, mems[mi], host_allocs)
            mi += 1
        while stack:
            _pop(stack)
        _merge_self_calls(records, first_of_thread)

    # Device time: to the operator that launched each kernel.
    kernel_aggs: dict[tuple[str, str], _Agg] = {}
    graph_kernels, graph_us = 0, 0.0
    for kind, evs in ((KIND_KERNEL, device), (KIND_DEVICE_ANNOTATION, device_ann)):
        for e in evs:
            dur = e.dur if e.dur > 0 else 0
            agg = kernel_aggs.get((e.name, kind))
            if agg is None:
                agg = kernel_aggs[(e.name, kind)] = _Agg(e.name, kind)
            agg.calls += 1
            agg.self_dev += dur
            agg.dev_total += dur
            if kind == KIND_KERNEL and by_ext is not None:
                _attribute(e, dur, by_ext, correlation_rt)
                if e.args is not None and e.args.corr is not None:
                    rt = correlation_rt.get(e.args.corr)
                    if rt is not None and rt[_AGG].name in GRAPH_LAUNCHES:
                        graph_kernels += 1  # replayed by a CUDA graph: one launch for all
                        graph_us += dur

    for agg, _, child, self_dev, dev_total, mem, _, dur, _, merged, *_ in records:
        if not merged:  # _Agg.add, inlined: once per record
            agg.calls += 1
            agg.cpu_total += dur
            agg.self_cpu += dur - child if dur > child else 0.0
            agg.self_dev += self_dev
            agg.dev_total += dev_total
            if mem is not None:
                agg.self_cpu_mem += mem[0]
                agg.cpu_mem += mem[1]
                agg.self_dev_mem += mem[2]
                agg.dev_mem += mem[3]
    by_shape = _by_shape(records, scale) if shapes else []
    cost_rows, not_modelled, recorded = (_costs(costed, aggs, bool(device), scale) if costs
                                         else ([], {}, False))

    ops = [_to_op(a, scale) for a in aggs.values() if a.calls]
    ops += [_to_op(a, scale) for a in kernel_aggs.values()]
    self_cpu = sum(a.self_cpu for a in aggs.values()) * scale
    self_dev = sum(a.self_dev for (_, kind), a in kernel_aggs.items()
                   if kind == KIND_KERNEL) * scale
    props = meta.get("deviceProperties")
    props = props if isinstance(props, list) else []
    comm = _communication(comm_work or comm_calls, threads, comm_of, device)
    launches = _launches(device, correlation_rt)
    breakdown = step_breakdown(threads, step_ranges, device, scale, py_modules, launches,
                               device_name=_device_name(props),
                               device_mem_b=_device_memory(props))
    if breakdown is not None:
        breakdown.critical = critical_path(threads, device, scale)
        comm = _comm_in_steps(breakdown, comm, scale)
    compiled = _compiled_facts(records, aggs, device, correlation_rt, scale, step_ranges)
    op_calls = _op_calls(records, aggs, step_ranges, bool(device))
    runtime = (o.name for o in ops if o.kind == KIND_RUNTIME)
    return Profile(device_type=devices.of("cuda", _device_name(props), runtime_calls=runtime).kind
                   if device else None,
                   comm_us=comm[0] * scale if comm else None,
                   comm_overlap_us=comm[1] * scale if comm else None,
                   self_cpu_us=self_cpu, self_device_us=self_dev, steps=steps, ops=ops,
                   ops_by_shape=by_shape, breakdown=breakdown,
                   device_name=_device_name(props),
                   device_mem_capacity_b=_device_memory(props),
                   costs=cost_rows, not_modelled_us=not_modelled, shapes_recorded=recorded,
                   cost_basis=("device" if device else "cpu") if recorded else None,
                   graph_kernels=graph_kernels, graph_kernel_us=graph_us * scale,
                   compiled=compiled, peak_live_b=_peak_live(host_allocs),
                   op_calls=op_calls)


def _launches(device: list[_Event], correlation_rt: dict[Any, list]) -> list[tuple[float, float]]:
    """Each piece of device work's start and its launch on the host (the end of its runtime
    call: until the call returns the host is still launching it; under the profiler a
    launch call takes about as long as the launch-to-start delay, 12 us on an H200, and
    T5's launch-bound step read 12.5% of its idle time as work queued behind a dependency
    when counted from the call's start): which idle time had work queued. Work whose
    launch the trace does not hold but whose correlation id is below every launch the
    trace holds was launched before the trace began (ids grow with each call): minus
    infinity, queued from the trace's start. Other work without its launch: infinity (not
    known to be queued)."""
    never, before = float("inf"), float("-inf")
    ids = [c for c in correlation_rt if type(c) is int]
    first = min(ids) if ids else None
    out = []
    for e in device:
        corr = e.args.corr if e.args is not None else None
        rt = correlation_rt.get(corr) if corr is not None else None
        if rt is not None:
            call = rt[_EVENT]
            out.append((e.ts, call.ts + max(call.dur, 0)))
        elif first is not None and type(corr) is int and corr < first:
            out.append((e.ts, before))
        else:
            out.append((e.ts, never))
    return out


def _device_name(props: list) -> str | None:
    """The device's name; where a HIP build names it generically ("AMD Radeon Graphics"),
    with its compute capability and compute units, which tell the parts apart
    (reporter.analyze.peaks: "AMD Radeon Graphics (compute 9.0, 104 CUs)")."""
    first = props[0] if props and isinstance(props[0], dict) else {}
    name = first.get("name")
    if not isinstance(name, str):
        return None
    facts = [first.get(k) for k in ("computeMajor", "computeMinor", "numSms")]
    if (devices.of("cuda", name).vendor == "AMD" and not re.search(r"MI\d", name)
            and all(type(v) is int and 0 <= v < 100_000 for v in facts)):
        return f"{name} (compute {facts[0]}.{facts[1]}, {facts[2]} CUs)"
    return name


def _device_memory(props: list) -> int | None:
    mem = props[0].get("totalGlobalMem") if props and isinstance(props[0], dict) else None
    return mem if type(mem) is int and mem > 0 else None


def _cost_of(rec: list, args: Any) -> bool:
    """A modelled operator's cost. Of nested modelled operators, one carries the cost: a
    matrix product, convolution or attention keeps it from the helpers it calls (the
    copy of the bias in aten::addmm); otherwise the innermost one does (aten::linear
    leaves it to its aten::addmm, aten::softmax to aten::_softmax)."""
    if type(args) is _CostArgs:
        c = args.computed  # _scan_costs
    else:
        dims = args.dims if args.dims is not None else args.dims_old
        c = cost(rec[_AGG].name, dims, args.types, args.concrete)
    if c is None:
        return False
    above = []
    up = rec[_PARENT]
    while up is not None and (up[_COST] or up[_INSIDE]):  # none above has a cost otherwise
        if up[_COST]:
            if c.family != MATRIX and up[_COST].family == MATRIX:
                return False  # a helper inside a matrix operator: its time is the operator's
            above.append(up)
        up = up[_PARENT]
    rec[_COST] = c
    for up in above:
        up[_COST] = False
    return True


# What an operator runs under, from the innermost name around it that tells: the
# autograd engine, an optimizer, the runner's marks. "unmarked" is the forward of a trace
# without marks, and whatever else runs outside them.
PHASES = ("unmarked", "backward", "optimizer", "forward", "data", "loss")
_BACKWARD = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$|^backward$")
_OPTIMIZER = re.compile(r"^Optimizer\.step#|^optimizer_step$")
_DATA = re.compile(r"^enumerate\(DataLoader\)|^data_loading$|^input_copy$")


def _phase_of(name: str) -> int:
    if _BACKWARD.search(name):
        return 1
    if _OPTIMIZER.search(name):
        return 2
    return 3 if name == "forward" else 4 if _DATA.search(name) else 5 if name == "loss" else 0


# At most this many not-modelled operators are kept, the ones that take the most time.
NOT_MODELLED_ROWS = 15


def _costs(costed: list[list], aggs: dict, on_device: bool, scale: float
           ) -> tuple[list[dict[str, Any]], dict[str, float], bool]:
    """Modelled operators' FLOPs, bytes and time summed per (name, dtype, family, phase),
    time being device time on a GPU trace and CPU time (inclusive) on a CPU one; the
    self time of the operators that have no formula; whether the trace recorded input
    types (some call has a cost)."""
    groups: dict[tuple, list] = {}
    recorded = bool(costed)
    for rec in costed:
        c = rec[_COST]
        if c:
            owner = rec
            while owner[_MERGED]:
                owner = owner[_PARENT]
            t = owner[_TDEV] if on_device else owner[_DUR]
            if t <= 0:
                continue  # a CPU-side operator of a GPU trace
            key = (rec[_AGG], c, rec[_PHASE])  # calls with one cost repeat every step
            g = groups.get(key)
            if g is None:
                groups[key] = [1, t]
            else:
                g[0] += 1
                g[1] += t
    merged: dict[tuple[Any, ...], list[Any]] = {}
    for (agg, c, phase), (calls, t) in groups.items():
        name_key = (agg.name, c.dtype, c.family, PHASES[phase])
        g = merged.get(name_key)
        if g is None:
            g = merged[name_key] = [0, 0.0, 0.0, 0.0]
        g[0] += calls
        g[1] += c.flops * calls
        g[2] += c.bytes * calls
        g[3] += t
    unmodelled = {a.name: a.self_dev if on_device else a.self_cpu for a in aggs.values()
                  if a.kind == KIND_OP and not modelled(a.name)}
    rows = [{"name": n, "dtype": d, "family": f, "phase": p, "calls": g[0], "flops": g[1],
             "bytes": g[2], "time_us": g[3] * scale} for (n, d, f, p), g in merged.items()]
    top = sorted(((n, t) for n, t in unmodelled.items() if t > 0),
                 key=lambda kv: -kv[1])[:NOT_MODELLED_ROWS]
    return rows, {n: t * scale for n, t in top}, recorded


def _compiled_facts(records: list[list], aggs: dict, device: list[_Event],
                    correlation_rt: dict, scale: float,
                    step_ranges: list[tuple[float, float]]) -> dict[str, Any]:
    """What torch.compile's events say beyond their sums (reporter.analyze.compiled):

    - ``kernels``: each kernel Inductor generated, per compiled region it ran in
      (``"F/C"`` of the ``Torch-Compiled Region`` around it; a kernel of a compiled
      backward, under ``CompiledFunctionBackward``, belongs to the region whose
      ``CompiledFunction`` has the same autograd sequence number; None where no region
      encloses it, as in torch 2.0 traces): name, region, calls, time (device time of
      the kernels on a GPU, the C++ kernel's range on the CPU);
    - ``breaks``: how often a compiled region ran inside another one: after a graph
      break the frame runs the code Dynamo could not compile eagerly, then calls the
      frame Dynamo resumes in, whose region nests in its own; ``break_us`` the host time
      from the end of the outer region's last graph call to the nested region (the eager
      code of the break, Dynamo's guard checks included), ``break_lookup_us`` the guard
      checks in it, ``break_pairs`` the regions, outer and nested;
    - ``compiled_us``: host time in compiled code: the outermost regions (or, in torch 2.0
      traces, compiled functions) and compiled backwards, less the breaks' time (a region
      nested in another is counted once, the eager code of a break not at all);
      ``compiled_device_us``: the device time of the work launched from inside a
      compiled graph's call (``CompiledFunction``, ``## Call CompiledFxGraph ... ##``,
      ``CompiledFunctionBackward``); ``step_us``: ``compiled_us`` per profiled step
      (by the step each range starts in), when the trace marks steps.

    Empty when the trace holds no compiled region or compiled function."""
    labels: dict[int, str] = {}
    fwd = bwd = lookup = None
    for (name, _), a in aggs.items():
        m = REGION.match(name)
        if m is not None:
            labels[id(a)] = f"{m[1]}/{m[2]}"
        elif name == FORWARD:
            fwd = a
        elif name == BACKWARD:
            bwd = a
        elif name == CACHE_LOOKUP:
            lookup = a
    if not labels and fwd is None and bwd is None:
        return {}
    seq_region: dict[Any, str | None] = {}

    def region(rec: list | None) -> str | None:
        while rec is not None:
            a = rec[_AGG]
            label = labels.get(id(a))
            if label is not None:
                return label
            if a is bwd:
                args = rec[_EVENT].args
                return seq_region.get(args.seq) if args is not None else None
            rec = rec[_PARENT]
        return None

    # A graph break: the frame runs its graph, then the code Dynamo could not compile
    # eagerly, then calls the frame it resumes in, whose region nests in the first one.
    # The break's time: from the end of the outer region's last graph call (its start,
    # when it ran none) to the start of the nested region.
    def outer_of(rec: list) -> list | None:
        node = rec[_PARENT]
        while node is not None:
            if id(node[_AGG]) in labels:
                return node
            node = node[_PARENT]
        return None

    graph_work = {id(a) for (name, _), a in aggs.items()
                  if name == FORWARD or name.startswith("## Call CompiledFxGraph")}
    last_end: dict[int, float] = {}
    checks: dict[int, list[tuple[float, float]]] = defaultdict(list)
    breaks, break_us, break_lookup_us = 0, 0.0, 0.0
    pairs: dict[str, int] = defaultdict(int)
    compiled_ids = set(labels) | {id(a) for a in (fwd, bwd) if a is not None}
    outermost_us = 0.0
    spans = sorted(step_ranges)
    starts = [lo for lo, _ in spans]
    per_step = [0.0] * len(spans)

    def step_of(t: float) -> int | None:
        i = bisect_right(starts, t) - 1
        return i if i >= 0 and t < spans[i][1] else None
    for rec in records:
        a = rec[_AGG]
        if a is fwd and rec[_EVENT].args is not None and rec[_EVENT].args.seq is not None:
            seq_region[rec[_EVENT].args.seq] = region(rec[_PARENT])
        if id(a) in compiled_ids:
            node = rec[_PARENT]
            while node is not None and id(node[_AGG]) not in compiled_ids:
                node = node[_PARENT]
            if node is None:
                outermost_us += rec[_DUR]
                i = step_of(rec[_EVENT].ts)
                if i is not None:
                    per_step[i] += rec[_DUR]
        is_region = id(a) in labels
        if not (is_region or id(a) in graph_work or a is lookup):
            continue
        outer = outer_of(rec)
        if outer is None:
            continue
        key, ts = id(outer), rec[_EVENT].ts
        if a is lookup:
            checks[key].append((ts, rec[_DUR]))
        elif not is_region:
            last_end[key] = max(last_end.get(key, 0.0), rec[_END])
        else:
            since = max(last_end.get(key, outer[_EVENT].ts), outer[_EVENT].ts)
            breaks += 1
            break_us += max(0.0, ts - since)
            i = step_of(ts)
            if i is not None:
                per_step[i] -= max(0.0, ts - since)
            break_lookup_us += sum(d for t, d in checks.pop(key, []) if since <= t < ts)
            pairs[f"{labels[id(outer[_AGG])]} → {labels[id(a)]}"] += 1
            last_end[key] = rec[_END]
    kernels: dict[tuple[str, str | None], list[float]] = {}

    def generated(name: str) -> bool:
        return GENERATED.match(name) is not None or UNNAMED_TRITON.match(name) is not None

    if device:
        for e in device:
            if e.cat in ("kernel", "Kernel") and generated(e.name):
                rt = (correlation_rt.get(e.args.corr) if e.args is not None
                      and e.args.corr is not None else None)
                k = kernels.setdefault((e.name, region(rt)), [0, 0.0])
                k[0] += 1
                k[1] += max(0.0, e.dur)
    else:
        names = {id(a) for (name, kind), a in aggs.items()
                 if kind == KIND_OP and generated(name)}
        for rec in records:
            if id(rec[_AGG]) in names:
                k = kernels.setdefault((rec[_AGG].name, region(rec)), [0, 0.0])
                k[0] += 1
                k[1] += rec[_DUR]
    in_graph = graph_work | ({id(bwd)} if bwd is not None else set())
    device_us = 0.0
    for e in device:
        rt = (correlation_rt.get(e.args.corr) if e.args is not None
              and e.args.corr is not None else None)
        node = rt
        while node is not None and id(node[_AGG]) not in in_graph:
            node = node[_PARENT]
        if node is not None:
            device_us += max(0.0, e.dur)
    return {"kernels": [{"name": n, "region": r, "calls": int(c), "time_us": t * scale}
                        for (n, r), (c, t) in kernels.items()],
            "compiled_us": max(0.0, outermost_us - break_us) * scale,
            "compiled_device_us": device_us * scale,
            "step_us": [max(0.0, us) * scale for us in per_step],
            "breaks": breaks, "break_us": break_us * scale,
            "break_lookup_us": break_lookup_us * scale, "break_pairs": dict(pairs)}


def _facts(name: str, cat: str, aggs: dict, comm_of: dict) -> tuple:
    """What every event of one (category, name) shares: its row (_Agg), whether it
    is a collective (1 the work, 2 the call that enqueues it), a step, a runtime call,
    whether reporter.analyze.flops has a formula for it, the phase it starts (_phase_of)."""
    c = comm_of[name] = 1 if _COMM_WORK.search(name) else 2 if _COMM_CALL.search(name) else 0
    is_step = name.startswith("ProfilerStep#")
    shown = "ProfilerStep*" if is_step else name
    kind = _kind(name, cat)
    agg = aggs.get((shown, kind))
    if agg is None:
        agg = aggs[(shown, kind)] = _Agg(shown, kind)
    return (agg, c, is_step, cat in RUNTIME_CATS, cat in OP_CATS and modelled(name),
            _phase_of(name))


def _attribute(kernel: _Event, dur: float, by_ext: dict, correlation_rt: dict) -> None:
    """A kernel's time to the operator that launched it (External id), else to the
    caller of the runtime call with its correlation id; and to that operator's callers."""
    args = kernel.args
    if args is None:
        return
    ext = args.ext if args.ext is not None else args.ext_old
    owner = by_ext.get(ext) if ext is not None else None
    if owner is None and args.corr is not None:
        runtime = correlation_rt.get(args.corr)
        owner = runtime[_PARENT] if runtime is not None else None
    while owner is not None and owner[_MERGED]:
        owner = owner[_PARENT]  # merged into its parent
    if owner is not None:
        owner[_SDEV] += dur
        node = owner
        while node is not None:
            node[_TDEV] += dur
            node = node[_PARENT]


# Operators holding this share of their basis's self time or more (the device's on a GPU
# trace, the CPU's otherwise) are read call by call (_op_calls), at most OP_CALLS_ROWS.
OP_CALLS_SHARE = 0.25
OP_CALLS_ROWS = 3
# Calls in a step whose inputs grow, call by call, from one size to at least GROWTH times
# it, the sizes following the call's index with a correlation of GROWTH_FIT or more, in
# GROWTH_CALLS calls or more: each call works on all that came before (a quadratic
# pattern: torch.cat([out, piece]) in a loop, a sum over a growing prefix).
GROWTH = 4.0
GROWTH_FIT = 0.95
GROWTH_CALLS = 8


def _elements(dims: Any) -> int | None:
    """The elements of a call's tensor inputs from its recorded dims (a tensor's list of
    sizes, a tensor list's list of them; scalars are empty lists); None without any."""
    if not isinstance(dims, list):
        return None
    if dims and all(type(d) is int for d in dims):
        return math.prod(max(d, 0) for d in dims)
    found = [n for n in (_elements(d) for d in dims if isinstance(d, list) and d)
             if n is not None]
    return sum(found) if found else None


def _grows(sizes: list[int]) -> bool:
    """Whether ``sizes``, in call order, grow roughly linearly from the first to the last
    (GROWTH, GROWTH_FIT, GROWTH_CALLS)."""
    n = len(sizes)
    if n < GROWTH_CALLS or sizes[0] <= 0 or sizes[-1] < GROWTH * sizes[0]:
        return False
    mean_i, mean_s = (n - 1) / 2, sum(sizes) / n
    cov = sum((i - mean_i) * (s - mean_s) for i, s in enumerate(sizes))
    var_i = sum((i - mean_i) ** 2 for i in range(n))
    var_s = sum((s - mean_s) ** 2 for s in sizes)
    return var_s > 0 and cov / math.sqrt(var_i * var_s) >= GROWTH_FIT


def _op_calls(records: list[list], aggs: dict, step_ranges: list[tuple[float, float]],
              on_device: bool) -> dict[str, OpCalls]:
    """The calls of the operators that hold OP_CALLS_SHARE of the self time or more, read
    within the profiled steps (reporter.model.profile.OpCalls); none without steps."""
    if not step_ranges:
        return {}
    ops = [a for (_, kind), a in aggs.items() if kind == KIND_OP and a.calls]
    time = (lambda a: a.self_dev) if on_device else (lambda a: a.self_cpu)
    total = sum(time(a) for a in ops)
    tops = sorted((a for a in ops if total > 0 and time(a) >= OP_CALLS_SHARE * total),
                  key=time, reverse=True)[:OP_CALLS_ROWS]
    if not tops:
        return {}
    steps = sorted(step_ranges)
    starts = [s for s, _ in steps]
    by_step: dict[Any, dict[int, list[list]]] = {a: defaultdict(list) for a in tops}
    for rec in records:
        per = by_step.get(rec[_AGG])
        if per is None or rec[_MERGED]:
            continue
        ts = rec[_EVENT].ts
        i = bisect_right(starts, ts) - 1
        if i >= 0 and ts <= steps[i][1]:
            per[i].append(rec)
    out = {}
    for agg, per in by_step.items():
        if not per:
            continue
        i = max(per, key=lambda k: (len(per[k]), -k))  # the step with the most calls
        calls = sorted(per[i], key=lambda r: r[_EVENT].ts)
        sizes = [_elements(_dims(r[_EVENT].args)) for r in calls]
        known = [n for n in sizes if n is not None]
        modules: dict[str, int] = defaultdict(int)
        for r in calls:
            up = r[_PARENT]
            while up is not None and not up[_AGG].name.startswith(MODULE_MARK):
                up = up[_PARENT]
            if up is not None:
                modules[up[_AGG].name[len(MODULE_MARK):]] += 1
        module = max(modules, key=lambda m: modules[m]) if modules else None
        out[agg.name] = OpCalls(
            calls_per_step=sum(len(v) for v in per.values()) / len(steps),
            step_calls=len(calls),
            first_elements=known[0] if len(known) == len(sizes) else 0,
            last_elements=known[-1] if len(known) == len(sizes) else 0,
            growing=len(known) == len(sizes) and _grows(known), module=module)
    return out


def _dims(args: Any) -> Any:
    if args is None:
        return None
    dims = getattr(args, "dims", None)
    return dims if dims is not None else getattr(args, "dims_old", None)


def _by_shape(records: list[list], scale: float) -> list[Op]:
    """Operators grouped by name and input shapes."""
    shape_aggs: dict[tuple[str, str, str], _Agg] = {}
    for agg, _, child, self_dev, dev_total, mem, _, dur, _, merged, e, *_ in records:
        if merged:
            continue
        args = e.args
        dims = None
        if args is not None:
            dims = args.dims if args.dims is not None else args.dims_old
        key = (agg.name, agg.kind, _shape_key(dims))
        into = shape_aggs.get(key)
        if into is None:
            into = shape_aggs[key] = _Agg(agg.name, agg.kind)
        into.add(dur, child, self_dev, dev_total, mem)
    ops = []
    for (_, _, dims), a in shape_aggs.items():
        op = _to_op(a, scale)
        op.input_shapes = dims
        ops.append(op)
    return ops


_COMM_WORK = re.compile(r"^(gloo|nccl|mpi|ucc|xccl):|^nccl\w*Kernel|^ncclDevKernel|^rccl", re.I)
_COMM_CALL = re.compile(r"^c10d::|^c10d_functional::|^_c10d_functional::|record_param_comms")


def _communication(host_comm: list[tuple[float, float]], threads: dict, comm_of: dict,
                   device: list[_Event]) -> tuple[float, float] | None:
    """(time in collectives, the part of it that overlaps computation), or None without any.

    Communication is the union of the collectives' intervals: the NCCL (RCCL) kernels
    where the device ran any, else ``host_comm`` (the gloo/nccl ranges on the host, else
    the c10d calls). The host's ``nccl:*`` ranges only enqueue the kernels: counted
    beside them, they made a collective look longer and more overlapped than it ran.
    Computation is the union of the other kernels on a GPU profile (not copies or
    sets), or of the other operators on a CPU profile's threads.
    """
    comm: list[Any] = []
    compute: list[Any] = []
    for e in device:
        span = (e.ts, e.ts + max(e.dur, 0))
        if _COMM_WORK.search(e.name):
            comm.append(span)
        elif e.cat in ("kernel", "Kernel"):  # copies and sets are no computation
            compute.append(span)
    if not comm:
        comm = list(host_comm)
    if not comm:
        return None
    if not device:
        compute = [(e.ts, e.ts + max(e.dur, 0)) for evs in threads.values() for e in evs
                   if e.cat in ("cpu_op", "Operator") and not comm_of.get(e.name)]
    comm_u, compute_u = union(comm), union(compute)
    return sum(b - a for a, b in comm_u), overlap(comm_u, compute_u)


def _comm_in_steps(b: Breakdown, comm: tuple[float, float] | None, scale: float
                   ) -> tuple[float, float] | None:
    """The communication of a GPU trace with profiled steps, as the step breakdown measured
    it inside the steps (its exposed communication plus the part compute kernels hide), in
    the trace's units: one figure for the finding, the reading and the ranks (trace 07's
    whole trace gave 17.5% of the steps' time where the steps held 15.3%). Else ``comm``
    as it is."""
    if comm is None or not b.marked or "communication" not in b.device_us:
        return comm
    hidden = sum(b.device_notes_us.get("comm_overlapped", []))
    exposed = sum(b.device_us["communication"])
    if hidden + exposed <= 0:
        return comm  # collectives on the host only (gloo): no device figure
    return (hidden + exposed) / scale, hidden / scale


def _shape_key(dims: Any) -> str:
    """Input shapes as key_averages(group_by_input_shape=True) prints them: a list
    argument (a TensorList, whose trace entry is a list of shapes) shows as []."""
    if not isinstance(dims, list):
        return "[]"
    return str([[] if d and isinstance(d, list) and isinstance(d[0], list) else d
                for d in dims])


shape_key = _shape_key  # the key of Profile.ops_by_shape rows, for the what-ifs


def _kind(name: str, cat: str) -> str:
    if cat in RUNTIME_CATS:
        return KIND_RUNTIME
    if cat == "user_annotation" and not name.startswith("enumerate(DataLoader)"):
        return KIND_ANNOTATION
    return classify(name)


def _merge_self_calls(records: list, start: int) -> None:
    """Fold an event into its parent when both have one name and it is the only child.

    This is what key_averages() does (EventList._remove_dup_nodes): an operator
    that dispatches to itself counts once. The parent keeps its duration; the
    child's children, memory and kernels become the parent's.
    """
    for rec in records[start:]:
        up = rec[_PARENT]
        while up is not None and up[_MERGED]:
            up = up[_PARENT]
        rec[_PARENT] = up
        if up is None or up[_NCHILD] != 1 or up[_AGG].name != rec[_AGG].name:
            continue
        rec[_MERGED] = True
        up[_CHILD] = rec[_CHILD]  # the parent's children are now the child's children
        up[_NCHILD] = rec[_NCHILD]
        if rec[_MEM] is not None:
            mem = _mem(up)
            mem[0] += rec[_MEM][0]
            mem[2] += rec[_MEM][2]


def _mem(rec: list) -> list:
    if rec[_MEM] is None:
        rec[_MEM] = [0, 0, 0, 0]
    return rec[_MEM]


# Operators that only hand memory out: what they allocate is their caller's (an
# operator's output, allocated by the aten::empty it calls).
_ALLOCATORS = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
               "aten::new_empty_strided", "aten::resize_"}


def _charge_memory(stack: list[list], mem: tuple, host: list[tuple]) -> None:
    """An allocation (or free) belongs to the innermost open host event on its thread.
    The host's (device type 0) with an address and the allocator's total also go into
    ``host`` with the operator they are of (``_peak_live``)."""
    while stack and stack[-1][_END] <= mem[0]:
        _pop(stack)
    if mem[2] == 0 and mem[3] >= 0 and mem[4] >= 0:
        of = None
        if stack and mem[1] > 0:
            rec = stack[-1]
            while rec[_AGG].name in _ALLOCATORS and rec[_PARENT] is not None:
                rec = rec[_PARENT]
            of = rec[_AGG].name
        host.append((mem[0], mem[1], mem[3], mem[4], of))
    if not stack:
        return
    slot = 0 if mem[2] == 0 else 2
    m = _mem(stack[-1])
    m[slot] += mem[1]
    m[slot + 1] += mem[1]


def _count(value: Any) -> int:
    """A non-negative integer field of an event, or -1 where it is not one."""
    return value if type(value) is int and value >= 0 else -1


def _peak_live(host: list[tuple]) -> dict[str, int]:
    """The host memory live at the peak of what the allocator held in the trace (its
    "Total Allocated"), by the operator that allocated it (an allocator's to its caller):
    what a fix that no longer makes those tensors takes off the peak. Allocations made
    before the trace began are not in it (parameters, optimizer state)."""
    if not host:
        return {}
    host.sort(key=lambda m: m[0])
    peak = max(range(len(host)), key=lambda i: host[i][3])
    live: dict[int, tuple[int, str | None]] = {}
    for _, nbytes, addr, _, of in host[:peak + 1]:
        if nbytes > 0:
            live[addr] = (nbytes, of)
        else:
            live.pop(addr, None)
    by_op: dict[str, int] = defaultdict(int)
    for nbytes, of in live.values():
        if of is not None:
            by_op[of] += nbytes
    return dict(by_op)


def _pop(stack: list[list]) -> None:
    """Close the innermost event."""
    rec = stack.pop()
    if rec[_MEM] is not None:
        _closed(rec)


def _closed(rec: list) -> None:
    """A closed event's total memory counts in its parent's total."""
    parent = rec[_PARENT]
    if parent is not None:
        up, mem = _mem(parent), rec[_MEM]
        up[1] += mem[1]
        up[3] += mem[3]


def _to_op(a: _Agg, scale: float) -> Op:
    return Op(name=a.name, calls=a.calls, self_cpu_us=a.self_cpu * scale,
              cpu_total_us=a.cpu_total * scale, self_device_us=a.self_dev * scale,
              device_total_us=a.dev_total * scale, cpu_mem_b=a.cpu_mem,
              self_cpu_mem_b=a.self_cpu_mem, device_mem_b=a.dev_mem,
              self_device_mem_b=a.self_dev_mem, kind=a.kind)


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
    sums the modelled operators' FLOPs and bytes (reporter.analyze.flops)."""
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
    info = meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if rank is not None and (type(rank) is not int or not 0 <= rank < 1 << 20):
        raise BadInput(f"{path}: distributedInfo.rank is {str(rank)[:40]!r}, not a rank number",
                       error_id="bad-trace")
    profile.label = f"rank {rank}" if rank is not None else path.name
    if not profile.ops:
        raise BadInput(f"{path}: a Chrome trace without profiler events (no cpu_op, "
                       "runtime or kernel events)", error_id="bad-trace")
    return profile


@contextmanager
def _opened(path: Path) -> Iterator[io.BufferedReader]:
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise read_error(path, exc) from exc
    with f:
        yield f


# What one event costs at the peak of reading a trace (its record, the aggregates and the
# decoder's objects; the file is read a few MiB at a time, so its bytes are not held:
# measured 400-700 bytes on flat traces of 95-byte events and on a CPU training trace of
# 360-byte ones), with a margin; the plain parser's dictionaries cost about twice as
# much, with the whole file held. A trace whose events would not fit in the memory
# available is refused before it is decoded (a decoder that runs out of memory may crash
# the process rather than raise).
BYTES_PER_EVENT = 1024
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


def _fits(path: Path, f: io.BufferedReader, per_event: int) -> Callable[[int], None] | None:
    """Refuse (BadInput, ``[too-big]``) a trace whose decoded events would not fit in
    memory. Every event has a "ph" key: a plain file's are counted in one pass over its
    bytes, before any is decoded, unless the file is under 1/SMALL_FRACTION of the
    memory available. A gzipped file's cannot be without inflating it twice: the gate
    returned hears of each chunk's count before that chunk is decoded, and refuses the
    trace once the events so far would not fit."""
    budget = memory.available()
    if budget is None:
        return None
    room = budget - READ_CONSTANT
    if f.read(2) == b"\x1f\x8b":
        f.seek(0)
        seen = [0]

        def gate(events: int) -> None:
            seen[0] += events
            if seen[0] * per_event > room:
                raise _too_big(path, f"{seen[0]:,} events in the first part of it",
                               seen[0] * per_event, per_event, budget)
        return gate
    try:
        small = os.fstat(f.fileno()).st_size * SMALL_FRACTION < room
    except OSError as exc:
        raise read_error(path, exc) from exc
    f.seek(0)
    if small:
        return None
    events = _count_events(path, f)
    f.seek(0)
    if events * per_event > room:
        raise _too_big(path, f"{events:,} events", events * per_event, per_event, budget)
    return None


def _too_big(path: Path, what: str, need: int, per_event: int, budget: int) -> BadInput:
    return BadInput(f"{path}: {what} need about {need + READ_CONSTANT:,} bytes of memory to "
                    f"read ({per_event:,} bytes each and {READ_CONSTANT >> 20} MiB), more "
                    f"than the {budget:,} available: refused (free memory, or cut the trace "
                    "to fewer steps)", error_id="too-big")


def _count_events(path: Path, f: io.BufferedReader) -> int:
    """The number of "ph" keys in a plain file, read a piece at a time into one buffer."""
    piece, events, tail = bytearray(_PIECE), 0, b""
    needle = b'"ph"'
    try:
        while n := f.readinto(piece):
            events += piece.count(needle, 0, n) + (tail + piece[:3]).count(needle)
            tail = bytes(piece[max(0, n - 3):n])
    except OSError as exc:
        raise read_error(path, exc) from exc
    return events


def _whole_checked(path: Path) -> bytes:
    """The whole file for the plain parser, once its events are known to fit."""
    budget = memory.available()
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise read_error(path, exc) from exc
    if budget is not None and size > budget // 2:
        raise _too_big(path, f"{size:,} bytes", size, BYTES_PER_PLAIN_EVENT, budget)
    raw = _read_whole(path)
    budget = memory.available()
    if budget is not None:
        events = raw.count(b'"ph"')
        need = events * BYTES_PER_PLAIN_EVENT + len(raw)
        if need + READ_CONSTANT > budget:
            raise _too_big(path, f"{events:,} events", need, BYTES_PER_PLAIN_EVENT, budget)
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
    ``costs`` as for read_trace; ``progress`` hears of each file of a folder of many."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                   and p.name != "run.json")
    if not files:
        raise BadInput(f"{folder}: no run.json and no Chrome traces (*.json, *.json.gz)",
                       error_id="bad-input")
    if len(files) > MAX_TRACE_FILES:
        raise BadInput(f"{folder} holds {len(files):,} traces, over the limit of "
                       f"{MAX_TRACE_FILES}: analyze a folder of the ranks you want to see",
                       error_id="bad-input")
    profiles = []
    for i, p in enumerate(files, 1):
        if progress is not None and len(files) > 16:
            progress(f"reading trace {i}/{len(files)}: {p.name}")
        profiles.append(read_trace(p, costs=costs))

    def order(p: Profile):
        label = p.label
        return (0, int(label.split()[1])) if label.startswith("rank ") else (1, label)
    profiles = sorted(profiles, key=order)
    profiles[0].stragglers = stragglers(profiles)
    return profiles
