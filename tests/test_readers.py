"""Readers behind one interface (issue 67, item 4): ``sniff`` then ``read`` -> sections.

Every input the commands accept goes through reporter.ingest.readers.READERS; a new kind of
input is one Reader and its line there. The inputs are written here: a minimal kineto
trace, a key_averages() table, a table whose lines ``mpirun -l`` prefixed (JSON-looking),
and a gzip that holds no trace.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from reporter.errors import BadInput
from reporter.ingest import readers
from reporter.ingest.readers import ReadOptions, read_sections
from reporter.model.profile import Op, Profile
from reporter.model.run import Section
from conftest import cli

TABLE = """\
-------------------  ------------  ------------  ------------  ------------
               Name    Self CPU %      Self CPU   CPU total %     CPU total
-------------------  ------------  ------------  ------------  ------------
       aten::linear         10.00%       1.000ms        60.00%       6.000ms
        aten::addmm         50.00%       5.000ms        50.00%       5.000ms
         aten::relu         40.00%       4.000ms        40.00%       4.000ms
-------------------  ------------  ------------  ------------  ------------
Self CPU time total: 10.000ms
"""


def _trace(path: Path, rank: int | None = None) -> Path:
    """A kineto-style trace: two steps of addmm and relu on one thread."""
    events: list[dict] = []
    for step in range(2):
        t0 = 1000.0 * step
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1,
             "tid": 1, "ts": t0, "dur": 900.0},
            {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1,
             "ts": t0 + 10, "dur": 500.0, "args": {}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1,
             "ts": t0 + 600, "dur": 200.0, "args": {}},
        ]
    doc: dict = {"traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
    path.write_text(json.dumps(doc))
    return path


def test_each_input_is_read_by_its_reader(tmp_path):
    """A folder of ranks, a trace and a table: each gives its sections, with the labels
    its reader gives (the rank, the file name, the table's)."""
    (tmp_path / "ranks").mkdir()
    for r in (1, 0):
        _trace(tmp_path / "ranks" / f"r{r}.json", rank=r)
    got = read_sections(tmp_path / "ranks", ReadOptions())
    assert [s.label for s in got] == ["rank 0", "rank 1"]
    assert all(isinstance(s, Section) and s.throughput is None for s in got)
    (one,) = read_sections(_trace(tmp_path / "t.json"), ReadOptions())
    assert one.label == "t.json" and {o.name for o in one.profile.ops} >= {"aten::addmm",
                                                                          "aten::relu"}
    (tab,) = read_sections(_write(tmp_path / "t.txt", TABLE), ReadOptions())
    assert {o.name: o.self_cpu_us for o in tab.profile.ops}["aten::addmm"] == 5000.0


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_json_looking_text_that_is_no_trace_falls_to_the_table_reader(tmp_path):
    """``mpirun -l`` prefixes each line with "[0] ": the trace reader sniffs JSON, finds no
    trace, and the table reader reads it."""
    text = "".join(f"[0] {line}\n" for line in TABLE.splitlines())
    (s,) = read_sections(_write(tmp_path / "log.txt", text), ReadOptions())
    assert {o.name for o in s.profile.ops} == {"aten::linear", "aten::addmm", "aten::relu"}


def test_neither_a_trace_nor_a_table_says_both_in_one_line(tmp_path):
    bad = _write(tmp_path / "x.json", '{"traceEvents": 3}')
    with pytest.raises(BadInput) as err:
        read_sections(bad, ReadOptions())
    assert "tried as a Chrome trace, then as a profiler table: no table either" in str(err.value)
    r = cli("analyze", str(bad), "--out", str(tmp_path / "out"))
    assert r.code == 2 and r.err.count("\n") == 1 and "Traceback" not in r.err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_gzip_that_is_no_trace_is_not_tried_as_a_table(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(TABLE.encode()))
    with pytest.raises(BadInput) as err:
        read_sections(path, ReadOptions())
    assert "profiler table" not in str(err.value)


class _Lines:
    """A reader of a made-up input, one operator per line ("name microseconds"), sniffed
    by its suffix: what adding a kind of input takes."""

    name = "an operator list"

    def sniff(self, path: Path) -> bool:
        return path.name.endswith(".ops")

    def read(self, path: Path, options: ReadOptions) -> list[Section]:
        ops = []
        for line in path.read_text().splitlines():
            name, us = line.split()
            ops.append(Op(name, calls=1, self_cpu_us=float(us), cpu_total_us=float(us)))
        p = Profile(label=path.name, ops=ops)
        p.self_cpu_us = sum(o.self_cpu_us for o in ops)
        return readers.sections_of([p])


def test_a_new_reader_is_one_line_in_readers_and_reaches_every_command(tmp_path, monkeypatch):
    """A reader put before the others is asked first, and what it reads is analyzed and
    rendered by ``reporter analyze`` as any other input (in-process: monkeypatch)."""
    monkeypatch.setattr(readers, "READERS", (_Lines(), *readers.READERS))
    path = _write(tmp_path / "x.ops", "aten::addmm 600\naten::relu 400\n")
    (s,) = read_sections(path, ReadOptions())
    assert s.label == "x.ops" and s.profile.self_cpu_us == 1000.0
    from reporter.pipeline import Output, analyze

    (md,) = analyze(str(path), tmp_path / "runs", tmp_path / "out",
                    Output("en"))
    assert "aten::addmm" in md.read_text()


def test_every_reader_has_the_interface():
    for r in readers.READERS:
        assert isinstance(r.name, str) and r.name
        assert callable(r.sniff) and callable(r.read)
    assert isinstance(readers.READERS[-1], readers.ProfilerTables)  # the last resort
