"""Chrome traces: the same numbers as key_averages(), on live profiles and on the corpus."""

from __future__ import annotations

import gzip
import json
import re
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

from reporter.collect.runner import _Stepper
from reporter.collect.target import build, resolve
from reporter.ingest import traces
from reporter.errors import BadInput
from reporter.model.profile import KIND_OP
from reporter.ingest.traces import read_trace, read_trace_folder
from conftest import SHARED, cli

TRACES = SHARED / "corpus" / "traces"
needs_corpus = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/corpus is absent")


def _live_trace(tmp_path: Path, name: str, memory: bool = True):
    spec, builder = resolve(name)
    target = build(spec, builder, "cpu", "tiny")
    step = _Stepper(target, target.modes[0], "cpu")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=memory,
                 schedule=schedule(wait=0, warmup=1, active=2, repeat=1)) as prof:
        for _ in range(3):
            step()
            prof.step()
    path = tmp_path / f"{name}.pt.trace.json"
    prof.export_chrome_trace(str(path))
    return prof, path


@pytest.mark.parametrize("name,memory", [("transformer-bloat", True), ("seq2seq", True),
                                         ("cnn", False)])
def test_trace_gives_the_numbers_of_key_averages(tmp_path, name, memory):
    prof, path = _live_trace(tmp_path, name, memory)
    averages = {e.key: e for e in prof.key_averages()}
    parsed = read_trace(path)
    mine = {o.name: o for o in parsed.ops}
    assert set(mine) == set(averages)
    for key, e in averages.items():
        o = mine[key]
        assert o.calls == e.count, key
        assert o.self_cpu_us == pytest.approx(e.self_cpu_time_total, rel=0.01, abs=0.01), key
        assert o.cpu_total_us == pytest.approx(e.cpu_time_total, rel=0.01, abs=0.01), key
        assert o.cpu_mem_b == e.cpu_memory_usage, key
        assert o.self_cpu_mem_b == e.self_cpu_memory_usage, key
    assert parsed.self_cpu_us == pytest.approx(sum(e.self_cpu_time_total
                                                   for e in averages.values()), rel=1e-6)
    assert parsed.steps == 2


def test_the_memory_live_at_the_host_peak_is_told_by_the_operator_that_allocated_it(
        tmp_path):
    """What the host allocator holds at its peak in the trace ("Total Allocated"), by the
    operator that asked for it: an aten::empty's bytes are its caller's; memory freed
    before the peak and allocated after it is not in it, nor is a device's."""
    def op(name, ts, dur):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                "dur": dur, "args": {}}

    def mem(ts, nbytes, addr, total, device=0):
        return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1,
                "tid": 1, "ts": ts, "s": "t",
                "args": {"Total Reserved": 0, "Total Allocated": total, "Bytes": nbytes,
                         "Addr": addr, "Device Type": device, "Device Id": -1}}

    events = [op("ProfilerStep#1", 0, 100),
              op("aten::mul", 1, 10), op("aten::empty", 2, 2), mem(3, 8192, 100, 8192),
              op("aten::_softmax", 20, 10), op("aten::empty", 21, 2),
              mem(22, 4096, 200, 12288), mem(25, 1 << 20, 900, 1 << 20, device=1),
              op("aten::add", 40, 10), mem(41, -8192, 100, 4096),
              mem(42, 6000, 300, 10096), mem(60, -4096, 200, 6000),
              op("aten::zeros", 70, 5), mem(71, 2048, 400, 8048)]
    path = tmp_path / "peak.json"
    path.write_text(json.dumps({"traceEvents": events}))
    parsed = read_trace(path)
    assert parsed.peak_live_b == {"aten::mul": 8192, "aten::_softmax": 4096}
    assert {o.name: o.cpu_mem_b for o in parsed.ops}["aten::mul"] == 8192
    # an address or a total that is not a count leaves the event out of the peak only
    odd = [dict(e, args={**e["args"], "Addr": "0x64"}) if e["ts"] == 3 else e
           for e in events]
    path.write_text(json.dumps({"traceEvents": odd}))
    parsed = read_trace(path)
    assert {o.name: o.cpu_mem_b for o in parsed.ops}["aten::mul"] == 8192
    assert parsed.peak_live_b == {"aten::_softmax": 4096}


def test_a_live_trace_tells_every_byte_at_the_host_peak(tmp_path):
    """On a live training step, what the operators hold at the peak adds up to what the
    allocator says it held then, less what it held before the trace (every allocation of
    the trace is inside an operator)."""
    _, path = _live_trace(tmp_path, "transformer")
    peak = read_trace(path).peak_live_b
    held = max(e["args"]["Total Allocated"] for e in json.loads(path.read_text())["traceEvents"]
               if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0)
    assert peak and all(b > 0 for b in peak.values())
    # the allocator's total counts what the process held before the trace too (tensors of
    # earlier tests): at most that much of it is not the trace's own
    first = min((e for e in json.loads(path.read_text())["traceEvents"]
                 if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
                key=lambda e: e["ts"])["args"]
    before = first["Total Allocated"] - first["Bytes"]
    assert held - before <= sum(peak.values()) <= held


def test_gzipped_trace_and_nanosecond_mode_read_the_same(tmp_path):
    _, path = _live_trace(tmp_path, "transformer-bloat")
    plain = read_trace(path)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:  # kineto's ns mode: integer nanoseconds
        for k in ("ts", "dur"):
            if isinstance(e.get(k), (int, float)):
                e[k] = round(e[k] * 1000)
    doc["displayTimeUnit"] = "ns"
    ns = tmp_path / "ns.json"
    ns.write_text(json.dumps(doc))
    for other in (read_trace(gz), read_trace(ns)):
        by_name = {o.name: o for o in other.ops}
        for o in plain.ops:
            assert by_name[o.name].calls == o.calls
            assert by_name[o.name].self_cpu_us == pytest.approx(o.self_cpu_us, rel=1e-3, abs=0.01)


def test_other_layouts_of_a_trace_read_the_same(tmp_path):
    _, path = _live_trace(tmp_path, "transformer-bloat")
    doc = json.loads(path.read_text())
    compact = tmp_path / "compact.json"  # re-serialised: one line, other key order
    compact.write_text(json.dumps({"traceEvents": doc.pop("traceEvents"), **doc},
                                  separators=(",", ":")))
    listed = tmp_path / "list.json"  # the legacy form: a bare list of events
    listed.write_text(json.dumps(json.loads(compact.read_text())["traceEvents"]))
    expected = {o.name: o.calls for o in read_trace(path).ops}
    assert {o.name: o.calls for o in read_trace(compact).ops} == expected
    assert {o.name: o.calls for o in read_trace(listed).ops} == expected


def _ops(profile) -> dict:
    return {(o.name, o.kind): (o.calls, round(o.self_cpu_us, 3), o.self_cpu_mem_b)
            for o in profile.ops}


def test_odd_events_in_a_chunk_are_read_one_by_one(tmp_path, monkeypatch):
    """Events of unexpected shapes (not objects, a string time, a list for args) in
    the middle of a trace: the chunk holding them is read event by event, and
    the numbers are those of the same trace without them, plus what they add."""
    _, path = _live_trace(tmp_path, "transformer-bloat")
    monkeypatch.setattr(traces, "_PIECE", 1 << 16)  # read in many pieces, as a large trace is
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    thread = next(e for e in events if e.get("cat") == "cpu_op")
    odd = [5, "x", None, [1, 2], {"ph": "X", "cat": "cpu_op", "name": 7, "ts": 1, "dur": 1},
           {"ph": "X", "cat": "cpu_op", "name": "odd::op", "pid": thread["pid"],
            "tid": thread["tid"], "ts": "1.5", "dur": "0.25", "args": [1]},
           {"ph": "X", "cat": "cpu_op", "name": "odd::bool", "ts": True, "dur": 1},
           {"ph": "X", "cat": "cpu_op", "name": "odd::huge", "ts": 10**400, "dur": 1},
           {"ph": "X", "cat": "cpu_op", "name": "odd::ids", "pid": [1], "tid": {"a": 1},
            "ts": 2, "dur": 1, "args": {"External id": [1], "correlation": {"a": 1}}}]
    middle = len(events) // 2
    doc["traceEvents"] = events[:middle] + odd + events[middle:]
    odd_path = tmp_path / "odd.json"
    odd_path.write_text(json.dumps(doc, indent=1))
    assert odd_path.stat().st_size > 8 * traces._TAIL  # the odd events are in a chunk
    expected = _ops(read_trace(path))
    expected[("odd::op", "op")] = (1, 0.25, 0)
    expected[("odd::ids", "op")] = (1, 1.0, 0)
    assert _ops(read_trace(odd_path)) == expected


def test_a_cut_inside_a_name_falls_back_to_the_plain_parser(tmp_path, monkeypatch):
    """Names holding "}, {" look like the place between two events. A chunk cut
    there cannot decode; the whole file is then read again by the plain parser."""
    _, path = _live_trace(tmp_path, "transformer-bloat")
    monkeypatch.setattr(traces, "_PIECE", 1 << 16)
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op":
            e["name"] = e.pop("name") + "}, {x"  # last: the first "}, {" after most places
    odd_path = tmp_path / "braces.json"
    odd_path.write_text(json.dumps(doc, indent=1))
    plain = []
    real = traces._whole_events
    monkeypatch.setattr(traces, "_whole_events", lambda *a: plain.append(1) or real(*a))
    expected = {(n if k != "op" or n == "ProfilerStep*" else n + "}, {x", k): v
                for (n, k), v in _ops(read_trace(path)).items()}
    assert _ops(read_trace(odd_path)) == expected
    assert plain, "no chunk was cut inside a name: the test did not test the fallback"


def test_a_trace_read_in_small_pieces_and_chunks_reads_like_one_chunk(tmp_path, monkeypatch):
    """The reader holds a chunk of the file at a time, cut where one event ends: pieces
    and chunks far smaller than the trace (many cuts, many pieces joined, what was read
    let go of) give the numbers of the trace read in one chunk, plain and gzipped."""
    _, path = _live_trace(tmp_path, "transformer-bloat")
    gz = tmp_path / "bloat.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    monkeypatch.setattr(traces, "_CHUNK", 2 * path.stat().st_size)
    whole = _ops(read_trace(path))
    monkeypatch.setattr(traces, "_PIECE", 4096)
    monkeypatch.setattr(traces, "_GZIP_PIECE", 1024)
    monkeypatch.setattr(traces, "_CHUNK", 1 << 15)
    monkeypatch.setattr(traces, "_TAIL", 1 << 11)
    chunks = []
    real = traces._decode_chunk
    monkeypatch.setattr(traces, "_decode_chunk", lambda *a: chunks.append(1) or real(*a))
    assert path.stat().st_size > 20 * (1 << 15)
    assert _ops(read_trace(path)) == whole
    assert len(chunks) > 20, "the trace was not cut into many chunks"
    assert _ops(read_trace(gz)) == whole


def test_a_trace_report_is_named_after_the_trace(tmp_path):
    _, path = _live_trace(tmp_path, "cnn", memory=False)
    gz = tmp_path / "step.pt.trace.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    res = cli("analyze", gz, "--lang", "ru", "--out", tmp_path / "out")
    assert res.code == 0, res.err
    report = tmp_path / "out" / "step.pt.trace.json.report.ru.md"
    # the operators' table: the runner's marks (forward, backward: annotations, whose
    # self time on a tiny model can be the largest) are not operators
    top = max((o for o in read_trace(path).ops if o.kind == KIND_OP),
              key=lambda o: o.self_cpu_us)
    assert res.out.strip() == str(report) and f"`{top.name}`" in report.read_text()


def test_gzip_of_several_members_reads_like_the_plain_file(tmp_path):
    _, path = _live_trace(tmp_path, "transformer-bloat")
    data = path.read_bytes()
    gz = tmp_path / "members.json.gz"
    gz.write_bytes(gzip.compress(data[:1000]) + gzip.compress(data[1000:]))
    assert _ops(read_trace(gz)) == _ops(read_trace(path))


@needs_corpus
def test_hand_checked_rows_of_a_cuda_trace():
    p = read_trace(TRACES / "09_kernelheim-square-rtx2070.json")
    ops = {(o.name, o.kind): o for o in p.ops}
    pow_ = ops[("aten::pow", "op")]
    assert pow_.calls == 2
    # pow's own time: its durations less result_type, to and cudaLaunchKernel inside it
    assert pow_.self_cpu_us == pytest.approx((74.067 - 1.352 - 0.481 - 24.065)
                                             + (62.592 - 1.371 - 0.444 - 20.848), abs=1e-3)
    assert pow_.self_device_us == pytest.approx(1957.934 + 1952.047, abs=1e-3)
    copy = ops[("aten::copy_", "op")]
    assert copy.self_device_us == pytest.approx(45533.3 + 45485.777, abs=1e-3)
    memcpy = ops[("Memcpy HtoD (Pageable -> Device)", "kernel")]
    assert memcpy.calls == 2
    assert p.self_device_us == pytest.approx(1957.934 + 1952.047 + 45533.3 + 45485.777, abs=1e-2)
    assert ("ProfilerStep*", "annotation") in ops and p.steps == 2
    assert p.device_name == "NVIDIA GeForce RTX 2070"


def _raw_events(path: Path) -> list[dict]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = json.loads(data)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


# trace -> (an operator that does not call itself, whether kernels are attributed)
CORPUS = {
    "01_": ("aten::cat", True),                 # torch 1.8: Operator/Runtime/Kernel
    "03_": ("aten::empty", False),              # CPU only, gloo
    "04_": ("aten::addmm", True),               # AMD MI250 under CUDA categories
    "06_": ("aten::cudnn_convolution", True),   # A100, no ProfilerStep
    "07_": ("aten::mul", True),                 # A100, re-serialised, torch.compile regions
    "08_": ("aten::cudnn_convolution", False),  # CUPTI counters: no kernel events
    "09_": ("aten::pow", True),
}


# Traces beside the corpus's: written by tests/kineto.py, and the project's own H200 trace
# (tests/fixtures/traces): the same arithmetic on the raw events, in a clean clone.
@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> dict[str, Path]:
    from kineto import H200_TRAIN, training_trace, write

    folder = tmp_path_factory.mktemp("ours")
    ranks = folder / "ranks"
    ranks.mkdir()
    return {"written": write(folder / "written.json", training_trace()),
            "written-gz": write(folder / "written.pt.trace.json.gz",
                                training_trace(steps=4, data_us=50.0)),
            "rank-0": write(ranks / "rank0.json", training_trace(rank=0)),
            "rank-1": write(ranks / "rank1.json", training_trace(rank=1, kernel_us=90.0)),
            # short kernels between the host's operators: the device mostly waits
            "idle-rank": write(folder / "idle.json", training_trace(
                rank=0, data_us=50.0, kernel_us=4.0, allreduce_us=300.0)),
            "h200": H200_TRAIN}


@pytest.mark.parametrize("which, name, kernels", [
    ("written", "aten::addmm", True), ("written-gz", "aten::mm", True),
    ("rank-1", "aten::relu", True), ("h200", "aten::addmm", True),
    *((prefix, *CORPUS[prefix]) for prefix in (sorted(CORPUS) if TRACES.is_dir() else []))])
def test_traces_read_like_their_raw_events(ours, which, name, kernels):
    """Ours (tests/kineto.py's, the project's H200 trace) and each corpus trace where
    present: an operator's calls and time from its raw events, the kernels attributed."""
    path = ours[which] if which in ours else next(TRACES.glob(f"{which}*"))
    _reads_like_its_raw_events(path, name, kernels)


def _reads_like_its_raw_events(path: Path, name: str, kernels: bool) -> None:
    p = read_trace(path)
    events = [e for e in _raw_events(path) if e.get("ph") == "X" and e.get("name") == name
              and e.get("cat") in ("cpu_op", "Operator")]
    op = next(o for o in p.ops if o.name == name and o.kind == "op")
    assert op.calls == len(events)
    assert op.cpu_total_us == pytest.approx(sum(float(e["dur"]) for e in events), rel=1e-9)
    assert op.self_cpu_us <= op.cpu_total_us + 1e-6
    kernel_rows = [o for o in p.ops if o.kind == "kernel"]
    assert bool(kernel_rows) == kernels and p.has_device == kernels
    if kernels:  # every kernel's time went to some operator or annotation
        attributed = sum(o.self_device_us for o in p.ops
                         if o.kind not in ("kernel", "device_annotation"))
        assert 0.5 * p.self_device_us <= attributed <= p.self_device_us * 1.0001


@pytest.mark.parametrize("which", ["written-gz"] + (["06_"] if TRACES.is_dir() else []))
def test_folder_of_per_rank_copies_of_a_trace(tmp_path, ours, which):
    source = ours[which] if which in ours else TRACES / "06_hta-alexnet-a100.json.gz"
    _a_folder_of_ranks(tmp_path, source)


def _a_folder_of_ranks(tmp_path: Path, source: Path) -> None:
    data = source.read_bytes()
    src = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    for rank in (1, 0):
        src["distributedInfo"] = {"rank": rank, "world_size": 2}
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(src))
    profiles = read_trace_folder(tmp_path)
    assert [p.label for p in profiles] == ["rank 0", "rank 1"]
    res = cli("analyze", tmp_path, "--json")
    assert res.code == 0 and len(json.loads(res.out)["profiles"]) == 2


def test_analyze_a_trace_without_torch(tmp_path):
    _, path = _live_trace(tmp_path, "transformer-bloat")
    code = ("import sys; from reporter.cli import main; rc = main(['analyze', sys.argv[1], "
            "'--json']); assert 'torch' not in sys.modules and 'weasyprint' not in sys.modules;"
            " sys.exit(rc)")
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    ops = json.loads(res.stdout)["profiles"][0]["ops"]
    assert any(o["name"] == "aten::mul" for o in ops)


@pytest.mark.parametrize("content,words", [
    (b"{", ["not valid JSON"]),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op"', ["not valid JSON"]),
    (b'{"traceEvents": 3}', ["not a Chrome trace"]),
    (b'{"traceEvents": []}', ["without profiler events"]),
    (b'{"hello": "world"}', ["not a Chrome trace"]),
    (gzip.compress(b'{"traceEvents": []}' * 50)[:30], ["gzip"]),
    (b"\x1f\x8b\x08\x00garbage", ["gzip"]),
    (b"[" * 100000, ["JSON"]),
])
def test_bad_traces_give_one_line_and_exit_2(tmp_path, content, words):
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    res = cli("analyze", path, "--json")
    assert res.code == 2, (res.code, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), res.err
    assert "Traceback" not in res.err


_EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
     "args": {"External id": 1, "Input Dims": [[2, 2]]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
     "ts": 11, "dur": 1, "args": {"correlation": 7, "External id": 1}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12, "dur": 3,
     "args": {"correlation": 7, "External id": 1}},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 12,
     "args": {"Bytes": 16, "Device Type": 0}},
]


def test_a_field_of_the_wrong_type_never_crashes(tmp_path):
    """Every field of each kind of event (ids, threads, times, args) replaced by a
    value of another type: a result or one clear line, never an internal error."""
    path = tmp_path / "typed.json"
    for i, event in enumerate(_EVENTS):
        for key in [k for k in event if k != "args"] + [f"args.{k}" for k in event["args"]]:
            for value in ([1], {"a": 1}, True, None, "x", 1.5, -1, 10**30, [[1, [2]]]):
                events = json.loads(json.dumps(_EVENTS))
                holder = events[i]["args"] if key.startswith("args.") else events[i]
                holder[key.removeprefix("args.")] = value
                path.write_text(json.dumps({"traceEvents": events}))
                for shapes in (False, True):
                    try:
                        read_trace(path, shapes=shapes)
                    except BadInput:
                        pass


def test_fuzzed_inputs_never_crash(tmp_path):
    """Cut and corrupted tables and traces: a result or one clear line, exit 0 or 2."""
    _, trace = _live_trace(tmp_path, "transformer-bloat")
    table = _live_table()
    rng = random.Random(1234)
    sources = [trace.read_bytes(), gzip.compress(trace.read_bytes()), table.encode()]
    for i in range(60):
        data = bytearray(rng.choice(sources))
        how = rng.choice(("cut", "flip", "splice"))
        if how == "cut":
            data = data[: rng.randrange(1, len(data))]
        elif how == "flip":
            for _ in range(rng.randrange(1, 20)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            j = rng.randrange(len(data))
            data[j:j] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 50)))
        path = tmp_path / f"fuzz{i}.json"
        path.write_bytes(bytes(data))
        res = cli("analyze", path, "--json")
        assert res.code in (0, 2), (how, res.code, res.err[-500:])
        if res.code == 2:
            assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err
        else:
            json.loads(res.out)


def _live_table() -> str:
    model = torch.nn.Linear(16, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(torch.randn(8, 16)).sum().backward()
    return prof.key_averages().table(row_limit=10)


def _union(spans: list[tuple[float, float]]) -> list[list[float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _common(u: list[list[float]], w: list[list[float]]) -> float:
    i = j = 0
    total = 0.0
    while i < len(u) and j < len(w):
        a, b = max(u[i][0], w[j][0]), min(u[i][1], w[j][1])
        total += max(0.0, b - a)
        if u[i][1] < w[j][1]:
            i += 1
        else:
            j += 1
    return total


def _device_figures(path: Path) -> tuple[float, float, float]:
    """Independent arithmetic on the raw events: the share of the ProfilerStep windows in
    which the device ran anything (kernels, copies, memsets: their union), the time in
    NCCL kernels inside the steps (their union), and the part of it that overlaps the
    other kernels (computation: not copies or sets)."""
    events = [e for e in _raw_events(path) if e.get("ph") == "X"]

    def spans(keep) -> list[list[float]]:
        return _union([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                       if keep(e)])
    device = ("kernel", "gpu_memcpy", "gpu_memset")
    steps = spans(lambda e: str(e.get("name", "")).startswith("ProfilerStep#"))
    busy = spans(lambda e: e.get("cat") in device)
    nccl = spans(lambda e: e.get("cat") == "kernel" and "nccl" in e["name"].lower())
    other = spans(lambda e: e.get("cat") == "kernel" and "nccl" not in e["name"].lower())
    nccl = _union([(max(a, lo), min(b, hi)) for lo, hi in steps for a, b in nccl
                   if b > lo and a < hi])
    comm = sum(b - a for a, b in nccl)
    return (_common(busy, steps) / sum(b - a for a, b in steps), comm,
            _common(nccl, other) / comm)


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("path, fires", [
    # 35.5% busy (the kernel sum said 41.9%), but all its idle time had work queued: the
    # host could not have kept it busier (test_queue_truth)
    ("07_hta-a100-80gb-rank0.json.gz", False),
    ("11_hta-v100-nccl-rank1.json.gz", False),
    ("14_hta-two-ranks/sampled_rank-0.json.gz", True),
    ("14_hta-two-ranks/sampled_rank-1.json.gz", True)])  # 46.8%: missed by the kernel sum
def test_device_utilization_and_communication_are_unions_of_device_work(path, fires):
    _unions_of_device_work(TRACES / path, fires)


@pytest.mark.parametrize("which, fires", [("rank-0", False), ("idle-rank", True)])
def test_our_ranks_utilization_and_communication_are_unions_of_device_work(ours, which,
                                                                           fires):
    _unions_of_device_work(ours[which], fires)


def _unions_of_device_work(path: Path, fires: bool) -> None:
    """low-device-utilization reads the device's busy union inside the steps, not the sum
    of kernel durations (overlapping streams count once); communication-bound reads the
    NCCL kernels, not the host's nccl:* ranges beside them (which only enqueue them)."""
    busy, comm_us, overlap = _device_figures(path)
    res = cli("analyze", path, "--json")
    assert res.code == 0, res.err
    found = {f["rule"]: f for f in json.loads(res.out)["profiles"][0]["findings"]}
    assert ("low-device-utilization" in found) == fires
    if fires:
        assert found["low-device-utilization"]["share"] == pytest.approx(busy, abs=1e-6)
    comm = found["communication-bound"]
    assert comm["op_time_us"] == pytest.approx(comm_us, rel=1e-9)
    assert comm["overlap_share"] == pytest.approx(overlap, abs=1e-9)


def _launch_figures(path: Path) -> dict:
    """Independent arithmetic on the raw events: each kernel that starts inside a
    ProfilerStep and whose runtime call (same correlation id) the trace holds, its delay
    from that call's start; kernels whose call starts inside a step, per step. Kernels that
    share a correlation id (a CUDA graph's, replayed by one cudaGraphLaunch: trace 07) are
    one launch: only the first of them counts."""
    events = [e for e in _raw_events(path) if e.get("ph") == "X"]
    steps = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                   if str(e["name"]).startswith("ProfilerStep#"))
    calls = {e["args"]["correlation"]: float(e["ts"]) + max(float(e["dur"]), 0.0)
             for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}

    def inside(t):
        return any(lo <= t < hi for lo, hi in steps)
    first: dict = {}
    for e in events:
        corr = e.get("args", {}).get("correlation")
        if e.get("cat") == "kernel" and corr in calls:
            first[corr] = min(first.get(corr, float("inf")), float(e["ts"]))
    delays, launched = [], 0
    for e in events:
        if e.get("cat") != "kernel":
            continue
        corr = e.get("args", {}).get("correlation")
        call = calls.get(corr)
        if call is None or float(e["ts"]) != first[corr]:
            continue
        if inside(float(e["ts"])):
            delays.append(max(float(e["ts"]) - call, 0.0))
        launched += inside(call)
    delays.sort()

    def rank(q):  # nearest rank: the smallest value with a share q at or below it
        return delays[max(0, int(-(-len(delays) * q // 1)) - 1)]
    return {"kernels": len(delays), "delay_median_us": rank(0.5), "delay_p90_us": rank(0.9),
            "delay_max_us": delays[-1], "launches_per_step": launched / len(steps),
            "steps": len(steps)}


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("path", ["07_hta-a100-80gb-rank0.json.gz",
                                  "11_hta-v100-nccl-rank1.json.gz",
                                  "13_hta-v100-rank1-test.json.gz",
                                  "14_hta-two-ranks/sampled_rank-0.json.gz",
                                  "14_hta-two-ranks/sampled_rank-1.json.gz"])
def test_launch_statistics_match_the_raw_events(path):
    _launch_statistics_match(TRACES / path)


@pytest.mark.parametrize("which", ["written", "written-gz", "rank-0", "h200"])
def test_launch_statistics_of_our_traces_match_the_raw_events(ours, which):
    _launch_statistics_match(ours[which])


def _launch_statistics_match(path: Path) -> None:
    """Delay from launch to kernel start (median, p90, max), kernels launched per step,
    and the steps in which the queue ran dry (the device idle over 10 us with nothing
    launched: the breakdown's idle_host per step)."""
    expected = _launch_figures(path)
    res = cli("analyze", path, "--json")
    bd = json.loads(res.out)["profiles"][0]["breakdown"]
    mine = bd["launch"]
    for key, value in expected.items():
        assert mine[key] == pytest.approx(value, rel=1e-9), key
    dry = sum(1 for us in bd["device_us"]["idle_host"] if us > 10.0)
    assert mine["dry_steps"] == dry and mine["dry_share"] == pytest.approx(dry / len(
        bd["steps_us"]))


def _copy_figures(path: Path) -> dict:
    """Independent arithmetic on the raw events: the gpu_memcpy events that start inside a
    ProfilerStep, per (direction, memory kind) from their names: count, bytes, time."""
    events = [e for e in _raw_events(path) if e.get("ph") == "X"]
    steps = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
             if str(e["name"]).startswith("ProfilerStep#")]
    out: dict = {}
    for e in events:
        if e.get("cat") != "gpu_memcpy" or not any(lo <= float(e["ts"]) < hi
                                                   for lo, hi in steps):
            continue
        m = re.match(r"Memcpy (\w)to(\w) \((\w+) -> (\w+)\)", e["name"])
        direction = {"HD": "h2d", "DH": "d2h"}.get(m.group(1) + m.group(2), "d2d")
        host = m.group(3) if direction == "h2d" else m.group(4)
        kind = host.lower() if host in ("Pageable", "Pinned") else "device"
        g = out.setdefault((direction, kind), [0, 0, 0.0])
        g[0] += 1
        g[1] += e["args"]["bytes"]
        g[2] += float(e["dur"])
    return out


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("path,link", [
    ("07_hta-a100-80gb-rank0.json.gz", "PCIe 4.0 x16"),
    ("11_hta-v100-nccl-rank1.json.gz", "PCIe 3.0 x16"),
    ("13_hta-v100-rank1-test.json.gz", "PCIe 3.0 x16"),
    ("14_hta-two-ranks/sampled_rank-0.json.gz", None),   # no deviceProperties name
    ("14_hta-two-ranks/sampled_rank-1.json.gz", None)])
def test_copy_bandwidth_matches_the_raw_events(path, link):
    _copy_bandwidth_matches(TRACES / path, link)


@pytest.mark.parametrize("which, link", [("written", "PCIe 4.0 x16"),
                                         ("rank-1", "PCIe 4.0 x16"),
                                         ("h200", "PCIe 5.0 x16")])
def test_copy_bandwidth_of_our_traces_matches_the_raw_events(ours, which, link):
    _copy_bandwidth_matches(ours[which], link)


def _copy_bandwidth_matches(path: Path, link: str | None) -> None:
    """Per direction and memory kind, the copies' count, bytes, time and achieved GB/s
    (bytes over time); the peak is the GPU's PCIe link (host copies) or half its memory
    bandwidth (device copies), where the device is known."""
    expected = _copy_figures(path)
    assert expected, path  # something to check
    res = cli("analyze", path, "--json")
    rows = json.loads(res.out)["profiles"][0]["breakdown"]["copies"]
    assert {(r["direction"], r["kind"]) for r in rows} == set(expected)
    for r in rows:
        n, copied, us = expected[(r["direction"], r["kind"])]
        assert (r["copies"], r["bytes"]) == (n, copied)
        assert r["time_us"] == pytest.approx(us, rel=1e-9)
        assert r["gbps"] == pytest.approx(copied / us / 1e3, rel=1e-9)
        if r["direction"] != "d2d":
            assert r["link"] == link
            if link:
                assert r["peak_share"] == pytest.approx(r["gbps"] / r["peak_gbps"])


@pytest.mark.parametrize("which", ["ours"] + (["14_"] if TRACES.is_dir() else []))
def test_stragglers_on_a_two_rank_folder(ours, which):
    """Ours: rank 1's products take 90 us against rank 0's 60: compute holds it back, by
    more than the rule's 5%. Corpus 14 (where present): 0.7%, no straggler-rank finding."""
    folder = ours["rank-0"].parent if which == "ours" else TRACES / "14_hta-two-ranks"
    profiles = _stragglers_match(folder, "compute")
    found = {f["rule"]: f for f in profiles[0]["findings"]}
    if which == "ours":
        s = profiles[0]["stragglers"]
        assert found["straggler-rank"]["share"] == pytest.approx(s["extra_share"], rel=1e-12)
    else:
        assert "straggler-rank" not in found


def _stragglers_match(folder: Path, cause: str) -> list[dict]:
    """Each rank's mean step from its ProfilerStep events; the slowest rank, its extra
    time over the other, and the extra per cause from each rank's breakdown (causes sum
    to the step)."""
    steps = {}
    for path in sorted(folder.glob("*.json*")):
        data = path.read_bytes()
        doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
        durations = [float(e["dur"]) for e in doc["traceEvents"]
                     if str(e.get("name", "")).startswith("ProfilerStep#")]
        steps[doc["distributedInfo"]["rank"]] = sum(durations) / len(durations)
    res = cli("analyze", folder, "--json")
    profiles = json.loads(res.out)["profiles"]
    s = profiles[0]["stragglers"]
    assert {int(r["rank"].split()[1]): r["step_us"] for r in s["ranks"]} == \
        pytest.approx(steps, rel=1e-12)
    slow = max(steps, key=steps.get)
    assert s["slowest"] == f"rank {slow}"
    assert s["extra_us"] == pytest.approx(steps[slow] - steps[1 - slow], rel=1e-12)
    for r, p in zip(s["ranks"], profiles):
        device = {k: sum(v) / len(v) for k, v in p["breakdown"]["device_us"].items()}
        assert sum(r[c] for c in ("compute", "communication", "host", "waiting")) == \
            pytest.approx(r["step_us"], rel=1e-9)
        assert r["communication"] == pytest.approx(device["communication"], rel=1e-12)
    by = s["extra_by_cause_us"]
    assert sum(by.values()) == pytest.approx(s["extra_us"], rel=1e-6)
    assert s["cause"] == max(by, key=by.get) == cause
    return profiles
