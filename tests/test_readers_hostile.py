"""Every reader on hostile input: exit 0, or one line and exit 2; in bounded time and memory.

The odd files run the real command in a child process limited to 2 GiB of
address space and 10 seconds; the mutated tables run in-process (hundreds of
them), and a hypothesis test mutates tables at random: the forms of the corpus's tables
written by tests/profiler_tables.py, and the corpus's own where ../shared is present.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SHARED, cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reporter.errors import BadInput
from reporter.ingest.tables import parse_tables

CORPUS_TABLES = SHARED / "corpus" / "tables"
LIMITED = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30));"
           " from reporter.cli import main; sys.exit(main(sys.argv[1:]))")


def run_limited(*argv, memory: int = 2 << 30, timeout: float = 10) -> subprocess.CompletedProcess:
    """``reporter ARGV`` in a child process under 2 GiB of memory (or ``memory`` bytes);
    10 s (or ``timeout``) or the test fails."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = LIMITED.replace("2 << 30", str(memory))
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def ok_or_one_line(res) -> None:
    assert res.returncode in (0, 2), (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    if res.returncode == 2:
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr


EVENT = ('{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, '
         '"dur": DUR, "args": {}}')


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _gz_members() -> bytes:
    doc = b'{"traceEvents": [' + EVENT.replace("DUR", "5").encode() + b"]}"
    return gzip.compress(doc[:20]) + gzip.compress(doc[20:])


ODD_FILES = {
    "empty.txt": b"",
    "empty.json": b"",
    "garbage.bin": bytes(range(256)) * 400,
    "garbage.json": b"{" + os.urandom(50_000),
    "cut.json.gz": gzip.compress(b'{"traceEvents": [' + EVENT.replace("DUR", "5").encode()
                                 + b"]}")[:-9],
    "members.json.gz": _gz_members(),
    "nested.json": b"[" * 100_000 + b"]" * 100_000,
    "nested-events.json": b'{"traceEvents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "nan.json": ('{"traceEvents": [' + ", ".join(EVENT.replace("DUR", d) for d in
                                                 ("NaN", "Infinity", "-Infinity", "1e400", "5"))
                 + "]}").encode(),
    "duplicate-keys.json": ('{"traceEvents": [], "traceEvents": [' + EVENT.replace("DUR", "5")
                            + '], "displayTimeUnit": "ms", "displayTimeUnit": 3}').encode(),
    "null-events.json": b'{"traceEvents": [null, 1, "x", [], {}]}',
}


@pytest.mark.parametrize("name", sorted(ODD_FILES))
def test_odd_files(tmp_path, name):
    path = _write(tmp_path, name, ODD_FILES[name])
    ok_or_one_line(run_limited("analyze", path, "--json"))


@pytest.mark.slow
def test_a_bomb(tmp_path):
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        blank = b" " * (64 << 20)
        for _ in range(64):  # 4 GiB of white space in 4 MB of gzip
            f.write(blank)
        f.write(b"]}")
    res = run_limited("analyze", path, "--json")  # under 2 GiB of memory
    ok_or_one_line(res)
    assert res.returncode == 2 and "decompression bomb" in res.stderr


def _flat_trace(path: Path, size: int) -> Path:
    """A trace of small nested events (about 95 bytes each), ``size`` bytes long."""
    pair = ('{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, '
            '"ts": TS, "dur": 8, "args": {}}, {"ph": "X", "cat": "cpu_op", "name": '
            '"aten::mm", "pid": 1, "tid": 1, "ts": TS, "dur": 5, "args": {}}')
    block = ", ".join(pair.replace("TS", str(10 * i)) for i in range(5000)).encode()
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(b'{"traceEvents": [')
        for i in range(size // len(block) + 1):
            f.write((b", " if i else b"") + block)
        f.write(b"]}")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", ["flat.json", "flat.json.gz"])
def test_a_trace_too_big_for_the_memory_is_refused_before_decoding(tmp_path, name):
    """About 1.4 M events: 1.4 GB as objects, which 1 GiB refused before the columns;
    read as columns (256 bytes an event) they fit under 1 GiB, and not under 384 MiB."""
    path = _flat_trace(tmp_path / name, 128 << 20)
    res = run_limited("analyze", path, "--json", memory=1 << 30, timeout=60)
    ok_or_one_line(res)
    assert res.returncode == 0, res.stderr
    res = run_limited("analyze", path, "--json", memory=384 << 20, timeout=20)
    ok_or_one_line(res)
    assert res.returncode == 2 and "[too-big]" in res.stderr and "events" in res.stderr


def test_a_fifo_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    res = run_limited("analyze", fifo, "--json")
    ok_or_one_line(res)
    assert res.returncode == 2 and "not a regular file" in res.stderr


def test_dev_zero_is_refused_without_reading_forever():
    res = run_limited("analyze", "/dev/zero", "--json")
    ok_or_one_line(res)
    assert res.returncode == 2


def test_a_folder_of_1000_empty_traces(tmp_path):
    for i in range(1000):
        (tmp_path / f"rank{i}.json").write_bytes(b"")
    res = run_limited("analyze", tmp_path, "--json")
    ok_or_one_line(res)
    assert res.returncode == 2


def _corpus_tables() -> list[Path]:
    return sorted(CORPUS_TABLES.glob("*.txt")) if CORPUS_TABLES.is_dir() else []


def _mutations(text: str):
    """Each line deleted in turn, and each line's columns shifted by one space either way."""
    lines = text.splitlines()
    for i in range(len(lines)):
        yield "\n".join(lines[:i] + lines[i + 1:])
    for i, line in enumerate(lines):
        for shifted in (" " + line, line.replace("  ", " ", 1), line[1:]):
            yield "\n".join(lines[:i] + [shifted] + lines[i + 1:])


def _written_tables() -> dict[str, str]:
    """The forms of the corpus's tables, written here (tests/profiler_tables.py): what the
    mutations start from in a clean clone, beside the corpus's own where present."""
    from profiler_tables import FORMS, ROWS, write_table

    return {name: write_table(ROWS, form) for name, form in sorted(FORMS.items())}


def _table_sources() -> list[tuple[str, str]]:
    return sorted(_written_tables().items()) + [
        (p.name[:2], p.read_text(encoding="utf-8")) for p in _corpus_tables()]


@pytest.mark.parametrize("name, text", _table_sources(), ids=[n for n, _ in _table_sources()])
def test_a_table_mutated_line_by_line(tmp_path, name, text):
    target = tmp_path / "t.txt"
    for i, mutated in enumerate(_mutations(text)):
        if i % 7:  # the library, in-process, for most; the command line for every 7th
            try:
                parse_tables(mutated, "t")
            except BadInput:
                pass
            continue
        target.write_text(mutated, encoding="utf-8")
        res = cli("analyze", target, "--json")
        assert res.code in (0, 2), res.err
        if res.code == 0:
            json.loads(res.out, parse_constant=lambda c: pytest.fail(f"{c} in --json"))
        else:
            assert len(res.err.strip().splitlines()) == 1, res.err


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_mutations_of_tables(data):
    tables = _table_sources()
    text = tables[data.draw(st.integers(0, len(tables) - 1))][1]
    for _ in range(data.draw(st.integers(1, 6))):
        if not text:
            break
        at = data.draw(st.integers(0, len(text) - 1))
        kind = data.draw(st.sampled_from(["delete", "insert", "replace", "cut"]))
        piece = data.draw(st.text(max_size=8))
        if kind == "delete":
            text = text[:at] + text[at + data.draw(st.integers(1, 40)):]
        elif kind == "insert":
            text = text[:at] + piece + text[at:]
        elif kind == "replace":
            text = text[:at] + piece + text[at + len(piece):]
        else:
            text = text[:at]
    try:
        profiles = parse_tables(text, "mutated")
    except BadInput:
        return
    for p in profiles:  # whatever was read is numbers that render: finite, named
        assert math.isfinite(p.self_cpu_us) and math.isfinite(p.self_device_us)
        for op in p.ops:
            assert isinstance(op.name, str) and op.name.strip()
            assert all(math.isfinite(v) for v in (op.self_cpu_us, op.cpu_total_us,
                                                   op.self_device_us, op.device_total_us))


def _key_table(names: list[str]) -> str:
    from reporter.model.profile import Op, Profile
    from reporter.render.keytable import format_table

    ops = [Op(name=n, calls=3, self_cpu_us=1000.0 * (len(names) - i),
              cpu_total_us=1000.0 * (len(names) - i)) for i, n in enumerate(names)]
    return format_table(Profile(label="x", ops=ops, self_cpu_us=sum(o.self_cpu_us for o in ops)),
                        name_width=60)


@pytest.mark.parametrize("names", [
    ["aten::mm", "<lambda>", "aten::add"],
    ["<lambda>", "aten::mm", "aten::add"],
    ["aten::mm", "# 3", "aten::add"],
    ["aten::mm", "```x", "aten::add"],
    ["aten::mm", "a\x0bb", "a\x0cc", "a\u2028d", "aten::add"],
], ids=["lambda", "lambda-first", "hash", "fence", "line-breaks"])
def test_every_row_of_a_table_is_read_whatever_its_name_starts_with(tmp_path, names):
    path = _write(tmp_path, "t.txt", _key_table(names).encode())
    res = run_limited("analyze", path, "--json")
    assert res.returncode == 0, res.stderr
    ops = [op["name"] for op in json.loads(res.stdout)["profiles"][0]["ops"]]
    assert sorted(ops) == sorted(names)


def test_a_fence_after_a_table_without_its_closing_line_still_ends_it(tmp_path):
    table = _key_table(["aten::mm", "aten::add"]).splitlines()
    text = "```\n" + "\n".join(table[:-2]) + "\n```\n\n## Next\n<details>\n"
    path = _write(tmp_path, "t.md", text.encode())
    res = run_limited("analyze", path, "--json")
    assert res.returncode == 0, res.stderr
    assert [op["name"] for op in json.loads(res.stdout)["profiles"][0]["ops"]] == [
        "aten::mm", "aten::add"]
