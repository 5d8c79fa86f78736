"""A stored run renders with today's timeline analyses (issue 67, item 4): each profile
read from a trace carries the stamp of the code that read its timeline; a run stored by
other code, whose trace it kept, has its timeline read again from that trace when it is
rendered, analysed or compared. run.json stays as it was stored.

The run is profiled here, live, on the CPU (a tiny built-in), and then made "old": its
stamp changed and its timeline analyses removed, as a run stored before they existed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reporter.ingest.traces import timeline_stamp
from reporter.inputs import TIMELINE_FIELDS, load_run
from conftest import cli


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    r = cli("run", "--target", "transformer", "--preset", "tiny", "--device", "cpu",
            "--quiet", "--time-budget", "0.3", "--format", "md", "--runs", str(runs))
    assert r.code == 0, r.err
    (folder,) = [p for p in runs.iterdir() if (p / "run.json").is_file()]
    return folder


def _aged(stored: Path, tmp_path: Path, keep_trace: bool = True) -> Path:
    """A copy of the run as an older reporter would have stored it: another stamp, no
    step breakdown, no compile facts, no peak of live memory; its calls read one by one
    with their counts wrong (where the runner placed each module's forward stays: only
    the live model knew it)."""
    folder = tmp_path / "runs" / stored.name
    shutil.copytree(stored, folder)
    doc = json.loads((folder / "run.json").read_text())
    for s in doc["run"]["sections"]:
        s["profile"].update(timeline="0" * 16, breakdown=None, compiled={}, peak_live_b={})
        for calls in s["profile"]["op_calls"].values():
            calls["calls_per_step"] = 0.0
        if not keep_trace:
            (folder / s["trace"]).unlink()
    (folder / "run.json").write_text(json.dumps(doc))
    return folder


def test_a_new_run_carries_todays_stamp(stored):
    doc = json.loads((stored / "run.json").read_text())["run"]
    assert {s["profile"]["timeline"] for s in doc["sections"]} == {timeline_stamp()}
    assert all(s["trace"] and (stored / s["trace"]).is_file() for s in doc["sections"])


def test_an_old_run_gets_todays_timeline_and_renders_as_a_new_one(stored, tmp_path):
    old = _aged(stored, tmp_path)
    before = (old / "run.json").read_bytes()
    said: list[str] = []
    run = load_run(old, said.append)
    assert len(said) == 1 and f"{len(run.sections)} section(s)" in said[0]
    new = load_run(stored)
    for a, b in zip(run.sections, new.sections, strict=True):
        for name in TIMELINE_FIELDS:
            assert getattr(a.profile, name) == getattr(b.profile, name), name
        assert a.profile.breakdown is not None
        assert [c.forward_at for c in a.profile.op_calls.values()] == \
            [c.forward_at for c in b.profile.op_calls.values()]
    # the reports of the old run and of the new one agree, apart from the run's folder
    r = cli("render", str(old), "--lang", "en")
    assert r.code == 0 and "read again from the traces" in r.err
    assert cli("render", str(stored), "--lang", "en").code == 0
    assert (old / "report.en.md").read_text() == (stored / "report.en.md").read_text()
    assert (old / "run.json").read_bytes() == before  # the stored run is not rewritten


def test_an_old_run_without_its_trace_renders_as_stored(stored, tmp_path):
    old = _aged(stored, tmp_path, keep_trace=False)
    said: list[str] = []
    run = load_run(old, said.append)
    assert said == [] and all(s.profile.breakdown is None for s in run.sections)
    r = cli("render", str(old), "--lang", "en")
    assert r.code == 0 and r.err == ""


def test_a_damaged_trace_leaves_the_section_as_stored(stored, tmp_path):
    old = _aged(stored, tmp_path)
    for s in json.loads((old / "run.json").read_text())["run"]["sections"]:
        (old / s["trace"]).write_bytes(b"\x1f\x8b not a gzip")
    run = load_run(old)
    assert all(s.profile.breakdown is None for s in run.sections)
    assert cli("render", str(old), "--lang", "en").code == 0


def test_the_stamp_is_of_the_code(monkeypatch):
    """Another source of one of the timeline's modules gives another stamp."""
    from reporter.ingest import traces

    here = timeline_stamp()
    timeline_stamp.cache_clear()
    monkeypatch.setattr(traces, "TIMELINE_CODE", traces.TIMELINE_CODE[:-1])
    try:
        assert timeline_stamp() != here
    finally:
        timeline_stamp.cache_clear()
    monkeypatch.undo()
    assert timeline_stamp() == here
