"""The timeline record (reporter.model.timeline) is the one door between a trace reader
and the timeline analyses (reporter.analyze.timeline): a reader that fills it with events
of its own type, not the Chrome-trace decoder's, gets the same Profile; and the decoder
imports no analysis of the timeline's beyond handing the record over."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reporter.analyze.timeline import profile_of
from reporter.ingest.traces import read_trace
from reporter.model.timeline import (
    DEVICE_ANNOTATION_CATS,
    DEVICE_CATS,
    HOST_CATS,
    MODULE_PREFIX,
    Timeline,
)
from tests import kineto

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Args:
    """Another reader's arguments: every field the record's docstring names, no cost."""

    ext: Any = None
    ext_old: Any = None
    corr: Any = None
    nbytes: Any = None
    device_type: Any = None
    addr: Any = None
    total: Any = None
    seq: Any = None
    copied: Any = None
    dims: Any = None
    dims_old: Any = None
    types: Any = None
    concrete: Any = None
    strides: Any = None


@dataclass
class Event:
    ph: str
    cat: str
    name: str
    pid: Any
    tid: Any
    ts: float
    dur: float
    args: Args | None


_KEYS = {"ext": "External id", "ext_old": "external id", "corr": "correlation",
         "nbytes": "Bytes", "device_type": "Device Type", "addr": "Addr",
         "total": "Total Allocated", "seq": "Sequence number", "copied": "bytes",
         "dims": "Input Dims", "dims_old": "Input dims", "types": "Input type",
         "concrete": "Concrete Inputs", "strides": "Input Strides"}


def _record(doc: dict) -> Timeline:
    """A reader of our own: the trace's dict sorted into the record by hand."""
    t = Timeline(meta={k: v for k, v in doc.items() if k != "traceEvents"})
    for raw in doc["traceEvents"]:
        a = raw.get("args")
        args = Args(**{k: a.get(v) for k, v in _KEYS.items()}) if isinstance(a, dict) else None
        e = Event(raw.get("ph", ""), raw.get("cat", ""), raw.get("name", ""), raw.get("pid"),
                  raw.get("tid"), raw.get("ts", 0), raw.get("dur", 0), args)
        if e.ph == "X" and e.cat in HOST_CATS:
            t.threads.setdefault((e.pid, e.tid), []).append(e)
        elif e.ph == "X" and e.cat in DEVICE_CATS:
            t.device.append(e)
        elif e.ph == "X" and e.cat in DEVICE_ANNOTATION_CATS:
            t.device_annotations.append(e)
        elif e.ph == "X" and e.name.startswith(MODULE_PREFIX):
            t.modules.append(e)
        elif e.ph == "i" and e.name == "[memory]" and args is not None:
            t.memory.setdefault((e.pid, e.tid), []).append(
                (e.ts, int(args.nbytes), int(args.device_type or 0), args.addr, args.total))
    return t


def test_another_reader_filling_the_record_gets_the_same_profile(tmp_path):
    """Read with every input (shapes), as the hand-made reader reads them; the FLOP costs
    are computed from the inputs the record holds (the decoder's own cost fields are its
    shortcut, not the record's)."""
    shapes = True
    doc = kineto.training_trace(steps=3, rank=0)
    path = kineto.write(tmp_path / "rank0.json", doc)
    expected = read_trace(path, shapes=shapes, costs=True).to_dict()
    got = profile_of(_record(json.loads(path.read_text())), shapes=shapes, costs=True)
    got.label, got.timeline = expected["label"], expected["timeline"]
    assert got.breakdown is not None and got.costs  # the analyses ran, not just the sums
    assert got.to_dict() == expected


def test_the_decoder_hands_the_record_over():
    """ingest's trace modules call one timeline analysis on a record, profile_of (the
    object record) or profile_of_columns (the columns); the nesting, attribution,
    breakdown and critical path are analyze's."""
    called: set[str] = set()
    for name in ("traces.py", "trace_events.py"):
        tree = ast.parse((ROOT / "reporter" / "ingest" / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "analyze" in node.module:
                called |= {f"{node.module}.{a.name}" for a in node.names}
    timeline = {c for c in called
                if any(m in c for m in (".timeline", ".breakdown", ".critical_path"))}
    # profile_of, and the slack within which one event encloses another (host_calls nests
    # the calls it lists the same way)
    assert timeline == {"analyze.timeline.profile_of", "analyze.timeline_records._EPS",
                        "analyze.timeline_columns.profile_of_columns"}
