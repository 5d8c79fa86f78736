"""Huge traces (#35 A1, A2): read in memory bounded by their events, or refused in one line.

Each trace is written in tmp and read by ``reporter analyze --json`` in a child process
under an address-space limit (RLIMIT_AS, as ``ulimit -v`` and ``prlimit --as`` set it).
The reader holds a chunk of the file at a time, never the whole of it: a 250 MB trace of
120,000 large events reads under a limit of 320 MiB, plain or gzipped (holding the file,
mapped or inflated, it could not: the limit is smaller than the file). A trace whose
events would not fit is refused ([too-big], exit 2) before they are decoded: never a
segfault in the decoder or a MemoryError.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from reporter.ingest import budget, traces

pytestmark = pytest.mark.slow

# The child prints its peak resident memory (VmHWM) after the command.
LIMITED = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (@LIMIT@, @LIMIT@)); "
           "from reporter.cli import main\n"
           "try:\n    rc = main(sys.argv[1:])\nfinally:\n"
           "    sys.stderr.write('PEAK ' + [l.split()[1] for l in open('/proc/self/status') "
           "if l.startswith('VmHWM')][0] + '\\n')\n"
           "sys.exit(rc)")


def _analyze(path: Path, limit: int, timeout: float = 120) -> tuple[int, str, str, int]:
    """Exit code, stdout, stderr without the peak line, and the peak in bytes."""
    res = subprocess.run([sys.executable, "-c", LIMITED.replace("@LIMIT@", str(limit)),
                          "analyze", str(path), "--json"],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True, timeout=timeout)
    lines = res.stderr.splitlines()
    peak = [int(line.split()[1]) * 1024 for line in lines if line.startswith("PEAK ")]
    err = "\n".join(line for line in lines if not line.startswith("PEAK "))
    assert res.returncode in (0, 2), (res.returncode, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    return res.returncode, res.stdout, err, peak[0] if peak else 0


def _write_trace(path: Path, pairs: int, pad: int) -> None:
    """``pairs`` nested pairs of operators on one thread; each event carries ``pad``
    random hex digits in an argument no reader decodes (each from another place in 4 MB
    of them: gzip cannot squeeze them, so a gzipped copy inflates under twice, far from
    the decompression-bomb guard)."""
    pool = os.urandom(2 << 20).hex()
    opener = gzip.open if path.name.endswith(".gz") else open
    kwargs = {"compresslevel": 1} if path.name.endswith(".gz") else {}
    with opener(path, "wb", **kwargs) as f:  # type: ignore[operator]
        f.write(b'{"schemaVersion": 1, "traceEvents": [\n')
        for i in range(pairs):
            at = (2 * i * 104_729) % (len(pool) - 2 * pad)
            pads = pool[at:at + pad], pool[at + pad:at + 2 * pad]
            f.write((b",\n" if i else b"") + (
                f'{{"ph": "X", "cat": "cpu_op", "name": "my::outer", "pid": 1, "tid": 1, '
                f'"ts": {10 * i}, "dur": 8, "args": {{"pad": "{pads[0]}"}}}},\n'
                f'{{"ph": "X", "cat": "cpu_op", "name": "my::inner", "pid": 1, "tid": 1, '
                f'"ts": {10 * i + 1}, "dur": 5, "args": {{"pad": "{pads[1]}"}}}}').encode())
        f.write(b'\n], "displayTimeUnit": "ms"}')


PAIRS, PAD = 60_000, 2_000  # 120,000 events, about 250 MB
LIMIT = 320 << 20


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("huge")
    paths = {name: folder / name for name in ("large.json", "large.json.gz")}
    for path in paths.values():
        _write_trace(path, PAIRS, PAD)
    return paths


@pytest.mark.parametrize("name", ["large.json", "large.json.gz"])
def test_a_trace_larger_than_the_memory_limit_reads_in_memory_bounded_by_its_events(
        large, name):
    path = large[name]
    inflated = large["large.json"].stat().st_size
    assert inflated > LIMIT * 3 // 4  # the file would not fit beside the reader's own memory
    code, out, err, peak = _analyze(path, LIMIT)
    assert code == 0, err
    ops = {op["name"]: op for op in json.loads(out)["profiles"][0]["ops"]}
    assert ops["my::outer"]["calls"] == ops["my::inner"]["calls"] == PAIRS
    assert ops["my::outer"]["self_cpu_us"] == pytest.approx(3 * PAIRS)
    events = 2 * PAIRS
    # The stated bound: bytes per event and a constant, whatever the file's size.
    assert 0 < peak < events * traces.BYTES_PER_EVENT + traces.READ_CONSTANT, peak
    assert peak < inflated / 2, (peak, inflated)


def _flat_trace(path: Path, size: int) -> None:
    """A1's trace in small: events of about 95 bytes, ``size`` bytes of them."""
    pair = ('{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, '
            '"ts": TS, "dur": 8, "args": {}}, {"ph": "X", "cat": "cpu_op", "name": '
            '"aten::mm", "pid": 1, "tid": 1, "ts": TS, "dur": 5, "args": {}}')
    opener = gzip.open if path.name.endswith(".gz") else open
    kwargs = {"compresslevel": 1} if path.name.endswith(".gz") else {}
    with opener(path, "wb", **kwargs) as f:  # type: ignore[operator]
        f.write(b'{"traceEvents": [')
        written, i = 0, 0
        while written < size:
            block = ", ".join(pair.replace("TS", str(10 * (i + k))) for k in range(5000))
            data = ((", " if i else "") + block).encode()
            f.write(data)
            written += len(data)
            i += 5000
        f.write(b"]}")


@pytest.fixture(scope="module")
def flat(tmp_path_factory) -> dict[str, Path]:
    """300 MB of small events (about 2.9 million), plain and gzipped."""
    folder = tmp_path_factory.mktemp("flat")
    paths = {name: folder / name for name in ("flat.json", "flat.json.gz")}
    for path in paths.values():
        _flat_trace(path, 300 << 20)
    return paths


@pytest.mark.parametrize("name", ["flat.json", "flat.json.gz"])
def test_a_trace_of_millions_of_events_reads_in_its_columns(flat, name):
    """The 300 MB of small events read under 1.5 GiB, as columns (at 1,024 bytes an event
    as objects, they were refused): the whole of it, in under BYTES_PER_COLUMN_EVENT an
    event and the constant."""
    code, out, err, peak = _analyze(flat[name], 3 << 29, timeout=300)
    assert code == 0, err
    ops = {op["name"]: op for op in json.loads(out)["profiles"][0]["ops"]}
    pairs = ops["aten::linear"]["calls"]
    assert ops["aten::mm"]["calls"] == pairs > 1_000_000
    assert ops["aten::linear"]["self_cpu_us"] == pytest.approx(3 * pairs)
    assert 0 < peak < 2 * pairs * traces.BYTES_PER_COLUMN_EVENT + traces.READ_CONSTANT, peak


@pytest.mark.parametrize("name", ["flat.json", "flat.json.gz"])
def test_a_trace_whose_events_would_not_fit_is_refused_before_they_are_decoded(flat, name):
    """The same under 768 MiB, where its columns would not fit: a plain file is counted
    and refused before any event is decoded; a gzipped one, whose events cannot be
    counted without inflating it twice, once the events so far would not fit, before
    the chunk that would pass the limit is decoded."""
    code, _, err, peak = _analyze(flat[name], 3 << 28)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "[too-big]" in err and "events" in err and "bytes each" in err, err
    if name == "flat.json":
        assert peak < 128 << 20, peak  # counted, not decoded


def test_a_small_plain_trace_is_not_counted_first_and_a_large_one_is(tmp_path, monkeypatch):
    """Counting a plain trace's events before decoding them took 7% of reading it: a
    trace under 1/SMALL_FRACTION of the memory available cannot hold more events than
    fit (its events take at most about 26 times its bytes), so it is not counted."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i,
         "dur": 1} for i in range(2000)]}))
    size = path.stat().st_size
    counted: list[int] = []
    real = budget._count_events

    def count(p, f):
        counted.append(1)
        return real(p, f)
    monkeypatch.setattr(budget, "_count_events", count)
    for free, expected in ((traces.READ_CONSTANT + size * traces.SMALL_FRACTION + 1, []),
                           (traces.READ_CONSTANT + size * traces.SMALL_FRACTION - 1, [1])):
        counted.clear()
        monkeypatch.setattr(traces.memory, "available", lambda free=free: free)
        assert traces.read_trace(path).steps == 0
        assert counted == expected


def test_tiny_events_of_a_name_each_fit_under_the_fraction(tmp_path):
    """The worst case measured for SMALL_FRACTION: events of 55 bytes, each of its own
    name (an _Agg, a record and a struct each), read under an address-space limit that
    leaves about SMALL_FRACTION times the file: not counted, and read whole."""
    path = tmp_path / "names.json"
    with open(path, "w") as f:
        f.write('{"traceEvents": [')
        f.write(", ".join(f'{{"ph": "X", "cat": "cpu_op", "name": "n{i}", "ts": {i}, '
                          f'"dur": 1}}' for i in range(60_000)))
        f.write("]}")
    size = path.stat().st_size
    base = _analyze(tmp_path / "missing.json", 4 << 30)[3]  # the interpreter's own peak
    code, out, err, peak = _analyze(path, base * 3 + size * traces.SMALL_FRACTION)
    assert code == 0, err
    assert json.loads(out)["profiles"][0]["ops"]
    assert peak - base < size * traces.SMALL_FRACTION, (peak - base) / size
