"""The store: atomic writes, runs that appear whole or not at all."""

from __future__ import annotations

import pytest

from reporter.errors import BadInput
from reporter.store import find, list_runs, load, staging, write_atomic
from conftest import FIXTURES


def test_write_atomic_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "out" / "report.md"
    write_atomic(target, "hello")
    assert target.read_text() == "hello"

    def fail(*_):
        raise OSError("disk full")

    monkeypatch.setattr("reporter.store.os.replace", fail)
    with pytest.raises(OSError):
        write_atomic(target, "half of a new report")
    assert target.read_text() == "hello"  # the old file stands, no temp file is left
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.md"]


def test_write_atomic_interrupted_as_it_creates_its_temp_file_leaves_none(tmp_path,
                                                                          monkeypatch):
    """An interrupt that comes once the temp file exists but before its name is known to
    the caller (inside the call that creates it) leaves nothing: the name is chosen first.
    With mkstemp, a fast chart writer interrupted by Ctrl-C left a .tmp file (CI)."""
    import os

    real = os.open

    def created_then_interrupted(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt
    monkeypatch.setattr("reporter.store.os.open", created_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "chart.svg", "<svg/>")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    mask = os.umask(0o027)
    try:
        made = write_atomic(tmp_path / "chart.svg", "<svg/>")
    finally:
        os.umask(mask)
    assert made.stat().st_mode & 0o777 == 0o640  # the user's umask, as any new file


def test_a_failed_staging_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with staging(tmp_path) as stage:
            (stage / "run.json").write_text("{}")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
    assert list_runs(tmp_path) == []


def test_load_round_trips_a_fixture():
    run = load(FIXTURES / "runs" / "cpu-transformer")
    assert [s.label for s in run.sections] == ["train", "inference"]
    assert run.sections[0].profile.ops and run.sections[0].throughput.windows


def test_find_by_id_fragment_and_errors(tmp_path):
    with pytest.raises(BadInput):
        find("latest", tmp_path)
    assert find(FIXTURES / "runs" / "cpu-tensor-ops", tmp_path).name == "cpu-tensor-ops"
    assert find("tensor-ops", FIXTURES / "runs").name == "cpu-tensor-ops"
    with pytest.raises(BadInput, match="ambiguous"):
        find("transformer", FIXTURES / "runs")


def test_a_run_stores_numbers_not_printed_tables(stored):
    """Runs stored before the report printed its own tables hold them as text: they load,
    and what is stored again has only the numbers (the report prints the tables)."""
    from reporter.store import run_to_json

    _, folder = stored("cpu-transformer")
    assert '"tables"' in (folder / "run.json").read_text(encoding="utf-8")
    run = load(folder)
    assert '"tables"' not in run_to_json(run)
    assert run.sections[0].profile.ops


def test_a_committed_run_has_no_owner_file(tmp_path):
    from reporter.store import OWNER_FILE, commit

    run = load(FIXTURES / "runs" / "cpu-tensor-ops")
    run.sections[0].trace = None
    with staging(tmp_path) as stage:
        assert (stage / OWNER_FILE).is_file()
        final = commit(run, stage, tmp_path)
    assert not (final / OWNER_FILE).exists() and (final / "run.json").is_file()
