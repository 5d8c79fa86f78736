"""The bulk nesting of a CPU trace (reporter.ingest.nesting) gives the very numbers of the
record-by-record loop it stands in for, on traces made to hold what that loop handles:
nested and tied events, self calls that fold, memory on and off the device, steps,
collectives, modelled operators inside each other, integer times; and it stands aside
(the loop reads the trace) where events overlap without nesting."""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

import pytest

from reporter.ingest import nesting, traces
from reporter.ingest.traces import read_trace
from conftest import SHARED

TRACES = SHARED / "corpus" / "traces"

MM = {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]}
ADDMM = {"Input Dims": [[16], [4, 8], [8, 16], [], []],
         "Input type": ["float", "float", "float", "Scalar", "Scalar"]}
ADD = {"Input Dims": [[4, 16], [4, 16], []], "Input type": ["float", "float", "Scalar"]}


def _tree(rng: random.Random, start: float, length: float, depth: int, out: list, tid: int,
          integer: bool) -> None:
    """Events nested inside [start, start + length), some starting with their parent."""
    t = start
    while depth < 5 and t < start + length * 0.9 and rng.random() < 0.8:
        dur = rng.uniform(0.0, (start + length - t) * 0.6)
        if integer:
            t, dur = int(t), int(dur)
        else:
            t, dur = round(t, 3), round(dur, 3)
        name, args = rng.choice([
            ("aten::mm", MM), ("aten::addmm", ADDMM), ("aten::add", ADD),
            ("aten::linear", MM), ("aten::to", {}), ("aten::empty", {}),
            ("aten::copy_", ADD), ("autograd::engine::evaluate_function: MmBackward0", {}),
            ("gloo:all_reduce", {}), ("aten::relu", ADD)])
        cat = "cpu_op"
        if rng.random() < 0.05:
            name = rng.choice(["forward", "backward", "loss", "module::enc"])
            cat, args = "user_annotation", {}
        out.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": t,
                    "dur": dur, "args": {**args, "Sequence number": len(out)}})
        if name == "aten::to" and rng.random() < 0.5:  # a self call: folds into its parent
            out.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid,
                        "ts": t, "dur": dur * 0.5 if not integer else dur // 2, "args": {}})
        else:
            _tree(rng, t, dur, depth + 1, out, tid, integer)
        t = t + dur + rng.choice([0.0, 0.5, 3.0])


def _trace(tmp_path: Path, seed: int, integer: bool = False, overlap: bool = False) -> Path:
    rng = random.Random(seed)
    events: list = []
    for tid in (1, 2):
        for step in range(3):
            lo = 10_000.0 * step + 100.0 * tid
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                           "pid": 1, "tid": tid, "ts": int(lo) if integer else lo,
                           "dur": 9_000 if integer else 9_000.0, "args": {}})
            _tree(rng, lo, 9_000.0, 1, events, tid, integer)
    for _ in range(300):
        at = rng.uniform(0, 30_000)
        events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1,
                       "tid": rng.choice([1, 2]), "ts": int(at) if integer else round(at, 3),
                       "s": "t", "args": {"Bytes": rng.choice([512, -512, 4096, 1 << 20]),
                                          "Device Type": rng.choice([0, 0, 1])}})
    if overlap:  # one event that starts inside another and ends after it
        first = next(e for e in events if e["ph"] == "X" and e["dur"] > 10)
        events.append({**first, "name": "aten::relu", "ts": first["ts"] + 1,
                       "dur": first["dur"] * 2})
    rng.shuffle(events)
    path = tmp_path / f"t{seed}.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _both(path: Path, monkeypatch) -> tuple[dict, dict, list]:
    taken: list = []
    real = nesting.aggregate_threads

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        taken.append(result is not None)
        return result
    monkeypatch.setattr(traces, "aggregate_threads", spy)
    bulk = asdict(read_trace(path))
    monkeypatch.setattr(traces, "aggregate_threads", lambda *a, **k: None)
    loop = asdict(read_trace(path))
    return bulk, loop, taken


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("integer", [False, True])
def test_bulk_nesting_gives_the_numbers_of_the_loop(tmp_path, monkeypatch, seed, integer):
    bulk, loop, taken = _both(_trace(tmp_path, seed, integer), monkeypatch)
    assert taken == [True]  # the bulk path ran, so the comparison means something
    assert bulk == loop
    ops = {o["name"]: o for o in bulk["ops"]}
    assert ops["aten::to"]["calls"] > 0 and ops["ProfilerStep*"]["calls"] == 6
    assert any(o["self_cpu_mem_b"] for o in bulk["ops"])  # memory was charged
    assert bulk["costs"]  # modelled operators were costed


def test_overlapping_events_leave_it_to_the_loop(tmp_path, monkeypatch):
    bulk, loop, taken = _both(_trace(tmp_path, 7, overlap=True), monkeypatch)
    assert taken == [False]
    assert bulk == loop


@pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/corpus is absent")
def test_corpus_cpu_trace_reads_the_same(monkeypatch):
    path = TRACES / "03_hta-cpu-only-gloo-rank34.pt.trace.json.gz"
    bulk, loop, taken = _both(path, monkeypatch)
    assert taken == [True] and bulk == loop
