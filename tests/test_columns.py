"""A trace is read as columns (#68: reporter.ingest.columns, analysed by
reporter.analyze.timeline_columns), and its Profile is the one the object reader
(read_trace_objects, reporter.analyze.timeline.profile_of) gives, to the last bit
(compared as JSON): the operator table, totals, steps, CUDA graphs' kernels, peak-live
memory, step breakdown, critical path, communication, FLOP costs, compile facts and the
calls read one by one. On a planted trace of the cases the nesting has to get right, on
training traces in kineto's format, on the project's H200 trace, and on the corpus's real
traces (where present). A trace too big to hold as objects is read whole."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from kineto import H200_TRAIN, training_trace, write

from reporter.ingest.traces import read_columns, read_trace, read_trace_objects

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "traces"
# a trace's Profile's fields (besides the operator table and by-shape rows)
FIELDS = ("device_type", "self_cpu_us", "self_device_us", "steps", "device_name",
          "device_mem_capacity_b", "graph_kernels", "graph_kernel_us", "peak_live_b",
          "comm_us", "comm_overlap_us", "breakdown", "costs", "not_modelled_us",
          "shapes_recorded", "cost_basis", "compiled", "op_calls")


def _json(profile) -> str:
    """A trace Profile's fields, as JSON (where 5 and 5.0 differ)."""
    return json.dumps({"ops": [vars(o) for o in profile.ops],
                       **{f: getattr(profile, f) for f in FIELDS}},
                      default=lambda o: o.__dict__)


def _same(path: Path) -> None:
    want, got = read_trace_objects(path), read_trace(path)
    assert _json(got) == _json(want)


def _x(name, ts, dur, cat="cpu_op", tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def _mem(ts, nbytes, addr, total, device=0, tid=1):
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1,
            "tid": tid, "ts": ts, "args": {"Bytes": nbytes, "Device Type": device,
                                           "Addr": addr, "Total Allocated": total}}


def planted() -> dict:
    """The cases, each where the nesting is easy to get wrong. Times are in microseconds;
    the events are out of order, and two threads interleave."""
    ev = [
        _x("ProfilerStep#1", 0, 1000, "user_annotation"),
        # a self call folded into its parent twice over (aten::to > aten::to > aten::to),
        # with memory inside the innermost and a kernel found by the middle one's id
        _x("aten::to", 10, 100, **{"External id": 1}),
        _x("aten::to", 11, 90, **{"External id": 2}),
        _x("aten::to", 12, 80, **{"External id": 3}),
        _x("aten::empty", 13, 5, **{"External id": 4}),
        _mem(14, 4096, 7, 4096),  # the allocator's, for the operator that called it
        _mem(15, 512, 9, 512, device=1),
        _mem(20, 256, 8, 4352),  # the folded call's, for the outer one
        # ties: equal starts, the longer encloses; a zero-length event at the same start
        _x("aten::linear", 200, 50, **{"External id": 5}),
        _x("aten::addmm", 200, 40, **{"External id": 6}),
        _x("aten::view", 200, 0, **{"External id": 7}),
        _x("cudaLaunchKernel", 210, 5, "cuda_runtime", correlation=100),
        _x("kernel_a", 260, 30, "kernel", correlation=100, **{"External id": 2}),
        # a kernel found only by its runtime call's correlation id (its External id is
        # none of the host's); one whose id is a string; one on a float id
        _x("aten::mul", 300, 50, **{"External id": "s1"}),
        _x("cudaLaunchKernel", 305, 5, "cuda_runtime", correlation=101),
        _x("kernel_b", 320, 7.5, "kernel", correlation=101, **{"External id": 999}),
        _x("kernel_c", 330, 2.25, "kernel", correlation=102, **{"External id": "s1"}),
        _x("aten::add", 400, 20, **{"External id": 8.0}),
        _x("kernel_d", 430, 1.5, "kernel", correlation=103, **{"External id": 8}),
        # overlapping, not nested: the second closes the first
        _x("aten::sum", 500, 50, **{"External id": 9}),
        _x("aten::mean", 520, 60, **{"External id": 10}),
        # a negative duration counts as 0
        _x("aten::neg", 600, -3, **{"External id": 11}),
        # a CUDA graph's launch and the kernels it replays
        _x("cudaGraphLaunch", 700, 10, "cuda_runtime", correlation=104),
        _x("graph_kernel", 720, 12.5, "kernel", correlation=104),
        _x("graph_kernel", 735, 12.5, "kernel", correlation=104),
        _x("gpu_mark", 720, 30, "gpu_user_annotation"),
        # memory freed, a free with no operator open, one with no address
        _mem(800, -4096, 7, 0),
        _mem(5, 64, 11, 64),
        _mem(810, 32, -1, 32),
        # another thread, written between the first's events
        _x("aten::copy_", 100, 40, tid=2, **{"External id": 12}),
        _mem(110, 128, 21, 4480, tid=2),  # the allocator's peak
        _x("aten::copy_", 101, 30, tid=2, **{"External id": 13}),
        _x("Memcpy HtoD", 150, 4, "gpu_memcpy", correlation=105, **{"External id": 13}),
        # a time no float holds: left out by both
        _x("aten::huge", 10 ** 400, 1),
        _x("ProfilerStep#2", 1000, 500, "user_annotation"),
        _x("aten::to", 1010, 10, **{"External id": 14}),
        # within the epsilon (1 ns): a sibling that starts before the last one ends, a
        # child that ends after its parent
        _x("aten::conv", 1100, 20, **{"External id": 15}),
        _x("aten::relu", 1119.9995, 10, **{"External id": 16}),
        _x("aten::outer", 1200, 50, **{"External id": 17}),
        _x("aten::inner", 1210, 40.0005, **{"External id": 18}),
    ]
    order = [3, 0, 2, 1] + list(range(4, len(ev)))
    return {"schemaVersion": 1, "traceEvents": [ev[i] for i in order],
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 1 << 37}]}


def test_the_planted_cases(tmp_path):
    path = write(tmp_path / "planted.json", planted())
    _same(path)
    got = read_trace(path)
    ops = {(o.name, o.kind): o for o in got.ops}
    # the cases were met, so that a wrong reading shows: the self calls folded (two
    # aten::to calls, of four records), the kernel and memory of a folded call charged to
    # the outer one, kernels by correlation, string and float ids
    to = next(o for (name, _), o in ops.items() if name == "aten::to")
    assert (to.calls, to.self_device_us, to.self_cpu_mem_b, to.cpu_mem_b, to.device_mem_b) \
        == (2, 30, 256, 4096 + 256, 512)
    assert next(o for (n, _), o in ops.items() if n == "aten::mul").self_device_us == 2.25 + 7.5
    assert next(o for (n, _), o in ops.items() if n == "aten::add").self_device_us == 1.5
    assert got.graph_kernels == 2 and got.graph_kernel_us == 25
    assert got.steps == 2
    assert got.peak_live_b == {"ProfilerStep*": 64, "aten::to": 4096 + 256, "aten::copy_": 128}


def test_a_nanosecond_trace(tmp_path):
    doc = planted()
    doc["displayTimeUnit"] = "ns"
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)) and e["ts"] < 1e300:
            e["ts"] = int(e["ts"] * 1000) + 1_700_000_000_000_000
        if "dur" in e:
            e["dur"] = int(e["dur"] * 1000)
    _same(write(tmp_path / "ns.json", doc))


def test_a_trace_without_steps(tmp_path):
    """Without ProfilerStep ranges the trace is one step, from its first host event to the
    one that ends last (here aten::mean, on the first thread, which no analysis reads)."""
    doc = planted()
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if not e["name"].startswith("ProfilerStep")]
    doc["traceEvents"].append(_x("aten::late", 2000, 300, tid=2))
    _same(write(tmp_path / "steps.json", doc))


def test_a_trace_the_plain_parser_reads(tmp_path):
    """A chunk with an event of an odd shape (a start written as a string) is read event
    by event by the plain parser, whose events carry their inputs' shapes: the calls read
    one by one see their sizes."""
    doc = training_trace(12)
    doc["traceEvents"][0]["ts"] = str(doc["traceEvents"][0]["ts"])
    path = write(tmp_path / "odd.json", doc)
    _same(path)
    calls = read_trace(path).op_calls
    assert calls and all(c.first_elements for c in calls.values())


@pytest.mark.parametrize("keep", ["kernel", "cpu_op", "[memory]"])
def test_a_trace_of_one_kind_of_event(tmp_path, keep):
    """Device work alone, host operators alone, memory events alone (no operator: refused
    by both readers alike)."""
    from reporter.errors import BadInput

    doc = planted()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if keep in (e["cat"], e["name"])]
    path = write(tmp_path / "one.json", doc)
    if keep == "[memory]":
        for read in (read_trace, read_trace_objects):
            with pytest.raises(BadInput, match="without profiler events"):
                read(path)
        return
    _same(path)


@pytest.mark.parametrize("rank", [None, 1])
def test_a_training_trace(tmp_path, rank):
    _same(write(tmp_path / "train.json.gz", training_trace(4, rank=rank)))


def test_the_h200_trace():
    _same(H200_TRAIN)


def test_columns_are_compact(tmp_path):
    """The columns take under 60 bytes an event (the object record: about 550)."""
    path = write(tmp_path / "train.json", training_trace(20))
    cols = read_columns(path)
    events = sum(len(t["ts"]) for t in (cols.host, cols.device, cols.memory))
    assert events == len([e for e in json.loads(path.read_text())["traceEvents"]
                          if e["cat"] != "ac2g"])
    assert cols.nbytes() < 60 * events
    assert all(a.dtype != np.dtype(object) for t in (cols.host, cols.device) for a in t.values())


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.json*"))
                         if CORPUS.is_dir() else [])
def test_the_corpus(name):
    _same(CORPUS / name)


def test_a_trace_too_big_for_objects_is_read_whole(tmp_path, monkeypatch):
    """Where the memory available would not hold the trace's events as objects (1,024
    bytes an event) but holds its columns (256 bytes an event, 1,024 a piece of device
    work), read_trace reads it whole, every analysis included; where even the columns
    would not fit, it is refused in one line."""
    from reporter import memory
    from reporter.errors import BadInput
    from reporter.ingest import traces

    from reporter.model.timeline import DEVICE_CATS

    path = write(tmp_path / "train.json", training_trace(400))
    events = json.loads(path.read_text())["traceEvents"]
    device = sum(e["cat"] in DEVICE_CATS for e in events)
    columns = (traces.BYTES_PER_COLUMN_EVENT * (len(events) - device)
               + traces.BYTES_PER_DEVICE_EVENT * device)
    assert columns < traces.BYTES_PER_EVENT * len(events) * 0.5
    want = read_trace_objects(path)
    assert want.breakdown is not None and want.costs and want.op_calls
    monkeypatch.setattr(memory, "available", lambda: traces.READ_CONSTANT + columns)
    with pytest.raises(BadInput, match=r"\[too-big\]|1,024 bytes each"):
        read_trace_objects(path)
    got = read_trace(path)
    want.timeline = got.timeline
    assert _json(got) == _json(want)
    monkeypatch.setattr(memory, "available", lambda: traces.READ_CONSTANT + columns // 2)
    with pytest.raises(BadInput, match="256 bytes each"):
        read_trace(path)


@pytest.mark.parametrize("piece", [5, 7, 64, 1 << 20])
def test_the_count_before_reading_sees_every_key_once(tmp_path, monkeypatch, piece):
    """The events and the device work a plain trace's count finds, read in pieces of any
    size (a key cut between two pieces counted once), are the file's."""
    from reporter.ingest import budget

    path = write(tmp_path / "t.json", planted())
    data = path.read_bytes()
    monkeypatch.setattr(budget, "_PIECE", piece)
    with open(path, "rb") as f:
        assert budget._count_events(path, f) == (data.count(b'"ph"'),
                                                 data.count(b'"kernel"')
                                                 + data.count(b'"gpu_memcpy"')) == (40, 7)


@pytest.mark.parametrize("name", ["train.json", "train.json.gz"])
def test_a_trace_read_in_worker_processes_is_the_same(tmp_path, monkeypatch, name):
    """Its chunks (here 64 KiB: dozens of them) decoded in 2 worker processes, in order,
    give read_trace's Profile; a chunk that does not decode sends the trace to read_trace
    in this process (its plain parser), with the same Profile."""
    from reporter.ingest import traces
    from reporter.ingest.ranks import read_trace_in_pool

    path = write(tmp_path / name, training_trace(60, rank=1))
    want = read_trace(path)
    monkeypatch.setattr(traces, "_CHUNK", 64 << 10)
    got = read_trace_in_pool(path, True, 2)
    assert (_json(got), got.label, got.timeline) == (_json(want), want.label, want.timeline)
    assert want.breakdown is not None and want.costs and want.comm_us
    # names holding what ends one event and begins the next: a chunk cut inside one
    cut = tmp_path / ("cut-" + name)
    doc = training_trace(60, rank=1)
    for e in doc["traceEvents"]:
        if e["cat"] == "cpu_op":
            e["name"] += "}, {"
    write(cut, doc)
    with open(cut, "rb") as f, pytest.raises(traces._NotChunkable):
        list(traces._chunked_events(cut, traces._pieces(cut, f), {}, traces.COSTS))
    assert _json(read_trace_in_pool(cut, True, 2)) == _json(read_trace_objects(cut))


def test_workers_read_a_trace_the_same_from_the_command_line(tmp_path):
    """`analyze TRACE --workers 2` prints what `--workers 1` does, and says nothing more."""
    from conftest import cli

    path = write(tmp_path / "train.json", training_trace(40))
    one, two = (cli("analyze", path, "--json", "--workers", n) for n in ("1", "2"))
    assert (one.code, two.code, two.out, two.err) == (0, 0, one.out, one.err)
    assert json.loads(one.out)["profiles"][0]["breakdown"]["steps_us"]


def test_how_many_workers_read_a_trace(tmp_path, monkeypatch):
    """--workers N is N, as many as the memory available holds; without it, this process
    (on 2 cores the workers gained no time: ranks.chunk_workers)."""
    from reporter import memory
    from reporter.ingest import ranks

    path = tmp_path / "t.json"
    path.write_bytes(b"{}")
    monkeypatch.setattr(memory, "available", lambda: 64 << 30)
    assert [ranks.chunk_workers(path, asked) for asked in (None, 1, 3)] == [1, 1, 3]
    monkeypatch.setattr(memory, "available", lambda: 4 * ranks._WORKER_PEAK)
    assert ranks.chunk_workers(path, 8) == 2
