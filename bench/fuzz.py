"""Mutation fuzzer: stored runs, profiler tables and Chrome traces, through the command line.

Each input is a seed with a few random edits. Runs (tests/fixtures/runs/*/run.json):
values of another type, nulls, huge, negative and non-finite numbers, numbers as
strings, deleted keys, values wrapped in lists and objects, lists emptied, cut or
repeated, values copied from elsewhere in the run, long strings with control characters
and markup. Tables (tests/fixtures/seeds/, and ../shared/corpus/tables when present):
line and token edits. Traces (a small GPU trace made here, the same padded to be read in
chunks, and the corpus's small traces when present): event field edits (types,
extremes, nulls, missing keys), 15% gzipped.

Each run goes through ``analyze RUN --json``, ``render RUN`` (Markdown, a random
language), ``compare BASE RUN --json`` and ``list``; each table or trace through
``analyze X --json`` and ``analyze X`` (Markdown). What is flagged (``problems``): a
traceback or ``internal error`` on stderr, more than one stderr line, an exit code other
than 0 or 2 (1 only with ``[too-long]`` or ``[memory]``), an input that takes longer than
the limit (a hang), and in a written report Python's ``None``, ``nan`` or ``inf``
where the input did not hold them.

tests/test_fuzz_runs.py runs a short seeded campaign in-process. This script runs a
longer one, each input in a forked child (with a time and memory limit, so that a hang
or a crash is one finding rather than the end of the campaign), and prints each finding
with the seed that reproduces it:

    .venv/bin/python bench/fuzz.py SECONDS [--seed N] [--kinds runs,tables,traces]
        [--keep DIR]

``--keep`` writes each flagged input there.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import io
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
CORPUS = ROOT.parent / "shared" / "corpus"
LANGS = ("en", "ru", "zh")
# A run whose sections (and breakdown) hold the most kinds of fields: a GPU run with
# copies, streams and a critical path, a CPU one, a busy one, a compiled one.
RUN_SEEDS = ("cuda-h200-transformer", "cpu-transformer-bloat", "cpu-transformer-busy",
             "cpu-transformer-compiled", "cpu-tensor-ops", "cuda-seed001")
BASE_RUN = "cpu-tensor-ops"


# ---- values an edit puts in -------------------------------------------------------------

_STRINGS = [
    "", "x", "NaN", "Infinity", "-Infinity", "nan", "inf", "None", "null", "1e400", "-1",
    "0", "3.5", "device", "DEVICE", "HtoD", "Pageable", "PCIe 5.0 x16", "rank 0",
    "{{ 7*7 }}", "{% raw %}", "<script>alert(1)</script>", "|a|b|", "`", "**x**",
    "\x1b]0;title\x07\x1b[2J\x1b[31mred", "a\rb", "a\nb\n::warning::x", "\x00", "\u202e",
    "\ud800", "@octocat https://example.com/x", "../../etc/passwd", "stream 7",
    "2026-13-45T99:99:99",
]
_NUMBERS: list[Any] = [0, -1, 1, -1e9, 1e9, 2**63, -(2**63), 10**400, 1e308, -1e308, 1e-320,
                       0.5, -0.0, 1e30, 1e31, 7]


def _long_string(rng: random.Random) -> str:
    piece = rng.choice(["\x1b[2J", "\x07", "\x0b", "\u2028", "a" * 10, "|", "`", "{{", "\ud800",
                        "宽", "\x7f", "\t"])
    return piece * rng.choice([10, 1000, 70_000])


def _deep(rng: random.Random) -> Any:
    value: Any = rng.choice([1, "x", None])
    for _ in range(rng.choice([3, 50, 500])):  # deeper: _byte_edit
        value = [value] if rng.random() < 0.5 else {"x": value}
    return value


def _value(rng: random.Random, old: Any = None) -> Any:
    """A value for an edit: often of another type than ``old``, or an extreme of its own."""
    r = rng.random()
    if r < 0.12:
        return None
    if r < 0.32:
        return rng.choice(_NUMBERS)
    if r < 0.38 and isinstance(old, (int, float)) and not isinstance(old, bool):
        return -old if old else -1
    if r < 0.50:
        return rng.choice(_STRINGS)
    if r < 0.55:
        return _long_string(rng)
    if r < 0.62:
        return rng.choice([True, False])
    if r < 0.70:
        return [] if rng.random() < 0.5 else {}
    if r < 0.78:
        return [old] if rng.random() < 0.5 else {"x": old}
    if r < 0.84:
        return _deep(rng)
    if r < 0.90 and isinstance(old, (int, float)) and not isinstance(old, bool):
        return str(old)
    if r < 0.95:
        return [rng.choice(_NUMBERS), rng.choice(_STRINGS)]
    return {rng.choice(_STRINGS): rng.choice(_NUMBERS)}


# ---- edits of a JSON tree ---------------------------------------------------------------

def _walk(doc: Any, rng: random.Random, stop: float) -> list[tuple[Any, Any]]:
    """A random path from the root: [(container, key)], each step a random key or index."""
    path: list[tuple[Any, Any]] = []
    node = doc
    while isinstance(node, (dict, list)) and node:
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path.append((node, key))
        node = node[key]
        if path and rng.random() < stop:
            break
    return path


def _copy(value: Any) -> Any:
    """A deep copy, or the value itself where it is nested too deeply to copy."""
    try:
        return copy.deepcopy(value)
    except RecursionError:
        return value


def _nodes(doc: Any) -> list[Any]:
    out, stack = [], [doc]
    while stack and len(out) < 20_000:
        node = stack.pop()
        out.append(node)
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def mutate_tree(doc: Any, rng: random.Random, stop: float = 0.15) -> str:
    """One random edit of a JSON tree, in place; what it did, for the log."""
    path = _walk(doc, rng, stop)
    if not path:
        return "nothing"
    parent, key = path[-1]
    old = parent[key]
    where = "/".join(str(k) for _, k in path)[:200]
    r = rng.random()
    if r < 0.15 and isinstance(parent, dict):
        del parent[key]
        return f"delete {where}"
    if r < 0.25 and isinstance(old, list):
        choice = rng.random()
        if choice < 0.3:
            old.clear()
        elif choice < 0.6:
            del old[rng.randrange(len(old) + 1):]
        else:
            old.extend(_copy(old[:rng.randint(1, 5)]) * rng.choice([1, 3]))
        return f"list {where}"
    if r < 0.32 and isinstance(old, dict) and old:
        k = rng.choice(list(old))
        old[rng.choice(_STRINGS)] = old.pop(k)
        return f"rename key {where}/{k}"
    if r < 0.40:
        other = rng.choice(_nodes(doc))
        parent[key] = _copy(other) if isinstance(other, (dict, list)) else other
        return f"copy {where}"
    parent[key] = _value(rng, old)
    try:
        said = repr(parent[key])[:60]
    except RecursionError:
        said = "a deep value"
    return f"set {where} = {said}"


def mutate_run(text: str, rng: random.Random) -> tuple[str, str]:
    """A run.json's text with 1 to 3 edits (rarely, a byte edit of the text)."""
    if rng.random() < 0.05:
        return _byte_edit(text, rng), "bytes"
    doc = json.loads(text)
    if rng.random() < 0.03:  # the document's own fields
        key = rng.choice(["run", "meta"])
        if rng.random() < 0.3:
            del doc[key]
            return json.dumps(doc), f"delete {key}"
        doc[key] = _value(rng, doc[key] if key == "meta" else None)
        try:
            return json.dumps(doc), f"set {key}"
        except (ValueError, RecursionError):
            return _byte_edit(text, rng), "bytes"
    run = doc["run"]
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        # Aim at the deeper parts of a section as often as at the whole tree.
        target: Any = run
        if rng.random() < 0.6 and run.get("sections"):
            section = rng.choice(run["sections"]) if isinstance(run["sections"], list) else None
            if isinstance(section, dict):
                target = section
                prof = section.get("profile")
                if rng.random() < 0.6 and isinstance(prof, dict):
                    target = prof
                    if rng.random() < 0.7 and isinstance(prof.get("breakdown"), dict):
                        target = prof["breakdown"]
        done.append(mutate_tree(target, rng, stop=0.3))
    try:
        return json.dumps(doc, ensure_ascii=rng.random() < 0.5), "; ".join(done)
    except (ValueError, RecursionError):  # a value made part of itself, or too deep to write
        return _byte_edit(text, rng), "bytes"


def _byte_edit(text: str, rng: random.Random) -> str:
    i = rng.randrange(len(text) + 1)
    r = rng.random()
    if r < 0.3:
        return text[:i]
    if r < 0.6:
        return text[:i] + rng.choice(["NaN", "1e400", "]", "}", "\ufeff", "\x00", "-",
                                      "[" * 5000]) + text[i:]
    j = min(len(text), i + rng.randint(1, 50))
    return text[:i] + text[j:]


# ---- tables and traces ------------------------------------------------------------------

_TOKENS = ["|", "---", "<lambda>", "```", "\x0b", "\r", "\x00", "\u2028", "9" * 400, "1e400",
           "nan", "1.2.3", "ms", "us", "GB", "-5", "Self CPU time total: ", "{{ 7*7 }}", "\t"]


def mutate_table(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    for _ in range(rng.choice([1, 2, 4])):
        if not lines:
            break
        i = rng.randrange(len(lines))
        r = rng.random()
        if r < 0.2:
            del lines[i]
        elif r < 0.35:
            lines.insert(i, lines[i])
        elif r < 0.45:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif r < 0.55:
            lines[i] = lines[i][:rng.randrange(len(lines[i]) + 1)]
        else:
            line = lines[i]
            k = rng.randrange(len(line) + 1)
            lines[i] = line[:k] + rng.choice(_TOKENS) + line[k + rng.choice([0, 0, 1, 5]):]
    return "\n".join(lines)


def small_trace() -> dict[str, Any]:
    """A GPU trace of two steps: host phases, launches, kernels on two streams, a copy,
    memory events and device properties."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]

    def x(name: str, ts: float, dur: float, cat: str = "cpu_op", pid: Any = 1, tid: Any = 1,
          **args: Any) -> None:
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if args:
            e["args"] = args
        ev.append(e)

    corr = 0
    for step in range(2):
        t = step * 1000.0
        x(f"ProfilerStep#{step + 1}", t, 1000, cat="user_annotation")
        x("forward", t, 400, cat="user_annotation")
        x("backward", t + 400, 400, cat="user_annotation")
        x("Optimizer.step#SGD.step", t + 800, 150, cat="user_annotation")
        for k in range(6):
            corr += 1
            at = t + 10 + k * 120
            x("aten::mm", at, 60, **{"Input Dims": [[64, 64], [64, 64]],
                                     "Input type": ["float", "float"], "External id": corr})
            x("cudaLaunchKernel", at + 5, 8, cat="cuda_runtime", correlation=corr)
            x(f"void gemm_{k}", at + 20, 70, cat="kernel", pid=0, tid=7 + (k % 2) * 2,
              correlation=corr, **{"External id": corr, "stream": 7 + (k % 2) * 2,
                                   "device": 0})
        corr += 1
        x("cudaMemcpyAsync", t + 850, 10, cat="cuda_runtime", correlation=corr)
        x("Memcpy HtoD (Pageable -> Device)", t + 860, 40, cat="gpu_memcpy", pid=0, tid=7,
          correlation=corr, bytes=1 << 20, **{"memory bandwidth (GB/s)": 26.2})
        ev.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]",
                   "pid": 1, "tid": 1, "ts": t + 20,
                   "args": {"Bytes": 4096, "Total Allocated": 8192, "Device Type": 0,
                            "Device Id": -1, "Addr": 1234 + step}})
    return {"schemaVersion": 1, "deviceProperties": [
        {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150_000_000_000,
         "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        "traceEvents": ev}


def mutate_trace(doc: dict[str, Any], rng: random.Random) -> str:
    """A trace's text with event edits (or, rarely, a byte edit)."""
    events = doc.get("traceEvents") or []
    for _ in range(rng.choice([1, 2, 3])):
        if not events:
            break
        # mostly the first events: the ones a padded trace reads in chunks (msgspec), and
        # where the small trace's steps, kernels and copies are
        e = rng.choice(events[:200] if rng.random() < 0.8 else events)
        if not isinstance(e, dict):
            continue
        key = rng.choice(["dur", "ts", "ph", "name", "cat", "tid", "pid", "args",
                          rng.choice(list(e) or ["x"])])
        r = rng.random()
        if r < 0.15:
            e.pop(key, None)
        elif r < 0.25:
            e[key] = None
        elif r < 0.35:
            events.append(_copy(e))
        elif r < 0.5 and isinstance(e.get("args"), dict) and e["args"]:
            a = e["args"]
            a[rng.choice(list(a))] = _value(rng)
        else:
            e[key] = _value(rng, e.get(key))
    if rng.random() < 0.1:
        doc = {k: (_value(rng) if rng.random() < 0.3 else v) for k, v in doc.items()}
    try:
        text = json.dumps(doc)
    except (ValueError, RecursionError):  # a value made part of itself, or too deep to write
        return "{\"traceEvents\": [" + "[" * 5000
    return _byte_edit(text, rng) if rng.random() < 0.05 else text


# ---- running an input -------------------------------------------------------------------

@dataclass
class Outcome:
    argv: list[str]
    code: int
    err: str
    out: str = ""
    seconds: float = 0.0


@dataclass
class Finding:
    kind: str
    seed: int
    edit: str
    argv: list[str]
    why: str
    err: str
    saved: Path | None = None


def call(argv: list[str]) -> Outcome:
    """``reporter.cli.main(argv)`` in this process, its output captured."""
    from reporter.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    return Outcome(argv, code, err.getvalue(), out.getvalue(), time.monotonic() - start)


def problems(o: Outcome) -> list[str]:
    """What is wrong with how a command ended (see the module's docstring)."""
    why = []
    if "Traceback" in o.err or "internal error" in o.err:
        why.append("internal error")
    lines = [line for line in o.err.splitlines() if line.strip()]
    if len(lines) > 1:
        why.append(f"{len(lines)} stderr lines")
    if o.code not in (0, 2) and not (o.code == 1 and ("[too-long]" in o.err
                                                     or "[memory]" in o.err)):
        why.append(f"exit {o.code}")
    return why


def _report_problems(folder: Path, source: str) -> list[str]:
    """Python's words for no value or no number in a report (``stream None``, ``nan``),
    where the input did not hold them as text."""
    why = []
    for md in folder.glob("*.md"):
        text = md.read_text(encoding="utf-8", errors="replace")
        for word in ("None", "nan", "inf"):
            if re.search(rf"(?<![\w.]){word}(?![\w(])", text) and word not in source:
                why.append(f"{word!r} in {md.name}")
    return why


Runner = Callable[[list[str]], Outcome]


def check_run(text: str, work: Path, rng: random.Random, runner: Runner = call
              ) -> list[tuple[list[str], str, str]]:
    """A mutated run.json stored under ``work``/runs, through analyze, render, compare and
    list: [(argv, why, stderr)] of each command flagged."""
    runs = work / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    folder = runs / "fuzzed"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    shutil.copytree(FIXTURES / "runs" / BASE_RUN, runs / "base")
    lang = rng.choice(LANGS)
    found = []
    for argv in (["analyze", "fuzzed", "--json", "--runs", runs],
                 ["render", "fuzzed", "--lang", lang, "--runs", runs],
                 ["compare", "base", "fuzzed", "--json", "--runs", runs],
                 ["list", "--runs", runs, "--lang", lang]):
        o = runner([str(a) for a in argv])
        why = problems(o)
        if argv[0] == "render" and o.code == 0:
            why += _report_problems(folder, text)
        if argv[0] == "list" and re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", o.out):
            why.append("control characters in list's output")
        if why:
            found.append((o.argv, ", ".join(why), o.err[-2000:]))
    return found


def check_input(name: str, data: bytes, work: Path, rng: random.Random,
                runner: Runner = call) -> list[tuple[list[str], str, str]]:
    """A mutated table or trace file, through ``analyze --json`` and ``analyze``."""
    shutil.rmtree(work / "in", ignore_errors=True)
    (work / "in").mkdir(parents=True)
    path = work / "in" / name
    path.write_bytes(data)
    out = work / "in" / "out"
    found = []
    for argv in (["analyze", path, "--json", "--runs", work / "runs"],
                 ["analyze", path, "--out", out, "--lang", rng.choice(LANGS),
                  "--runs", work / "runs"]):
        o = runner([str(a) for a in argv])
        why = problems(o)
        if "--out" in argv and o.code == 0:
            why += _report_problems(out, data.decode("utf-8", "replace"))
        if why:
            found.append((o.argv, ", ".join(why), o.err[-2000:]))
    return found


@dataclass
class Seeds:
    runs: dict[str, str] = field(default_factory=dict)
    tables: dict[str, str] = field(default_factory=dict)
    traces: dict[str, dict[str, Any]] = field(default_factory=dict)


def seeds(corpus: bool = True) -> Seeds:
    s = Seeds()
    for name in RUN_SEEDS:
        s.runs[name] = (FIXTURES / "runs" / name / "run.json").read_text(encoding="utf-8")
    for p in sorted((FIXTURES / "seeds").glob("*.txt")):
        if p.stat().st_size < 30_000:
            s.tables[p.name] = p.read_text(encoding="utf-8", errors="replace")
    s.traces["small.json"] = small_trace()
    padded = small_trace()  # over 100 kB: its first events are read in chunks, as a real
    padded["traceEvents"] += [  # trace's are, the last ones by the plain parser
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
         "ts": 3000.0 + 10 * i, "dur": 5} for i in range(2500)]
    s.traces["padded.json"] = padded
    if corpus and CORPUS.is_dir():
        for p in sorted((CORPUS / "tables").glob("*.txt")):
            s.tables[p.name] = p.read_text(encoding="utf-8", errors="replace")
        for p in sorted((CORPUS / "traces").glob("*.json*")):
            if p.stat().st_size < 60_000:
                raw = p.read_bytes()
                raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
                s.traces[p.name.replace(".gz", "")] = json.loads(raw)
    return s


def one(kind: str, seed: int, pool: Seeds, work: Path, runner: Runner = call
        ) -> tuple[str, str, list[tuple[list[str], str, str]], bytes]:
    """The input of (kind, seed), made and checked: (its seed's name, the edit, what was
    flagged, the input's bytes)."""
    rng = random.Random(f"{kind}-{seed}")
    if kind == "runs":
        name = rng.choice(sorted(pool.runs))
        text, edit = mutate_run(pool.runs[name], rng)
        return name, edit, check_run(text, work, rng, runner), text.encode(
            "utf-8", "surrogatepass")
    if kind == "tables":
        name = rng.choice(sorted(pool.tables))
        text = mutate_table(pool.tables[name], rng)
        data = text.encode("utf-8", "surrogatepass")
        return name, "table edits", check_input("t.txt", data, work, rng, runner), data
    name = rng.choice(sorted(pool.traces))
    data = mutate_trace(_copy(pool.traces[name]), rng).encode("utf-8",
                                                                      "surrogatepass")
    gz = rng.random() < 0.15
    if gz:
        data = gzip.compress(data)
    return (name, "trace edits", check_input("t.json.gz" if gz else "t.json", data, work, rng,
                                             runner), data)


# ---- the long campaign: each input in a forked child --------------------------------------

def _forked(limit_s: float, memory_b: int) -> Runner:
    """A runner that calls the command in a forked child under a time and memory limit."""
    import resource

    def run(argv: list[str]) -> Outcome:
        r, w = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(r)
            try:
                resource.setrlimit(resource.RLIMIT_AS, (memory_b, memory_b))
                signal.alarm(int(limit_s) + 1)
                o = call(argv)
                payload = json.dumps([o.code, o.err[-4000:]]).encode()
            except BaseException as exc:  # noqa: B036  (anything is a finding)
                payload = json.dumps([99, f"fuzz harness: {type(exc).__name__}: {exc}"]
                                     ).encode()
            os.write(w, payload)
            os._exit(0)
        os.close(w)
        chunks = []
        while True:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        seconds = time.monotonic() - start
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            what = "hang (killed after the time limit)" if sig == signal.SIGALRM else \
                f"killed by signal {sig}"
            return Outcome(argv, 128 + sig, f"{what}\n(fuzz) {seconds:.1f} s", "", seconds)
        try:
            code, err = json.loads(b"".join(chunks))
        except ValueError:
            code, err = 98, "fuzz harness: no result from the child"
        return Outcome(argv, code, err, "", seconds)

    return run


def campaign(seconds: float, seed: int, kinds: list[str], keep: Path | None,
             limit_s: float = 60.0, memory_b: int = 4 << 30) -> list[Finding]:
    # imported once, before the forks: each child starts with them
    import reporter.cli  # noqa: F401
    from reporter.pipeline import report_view  # noqa: F401
    from reporter.render import report

    report.environment("en")
    pool = seeds()
    runner = _forked(limit_s, memory_b)
    findings: list[Finding] = []
    counts = {k: 0 for k in kinds}
    end = time.monotonic() + seconds
    i = 0
    with tempfile.TemporaryDirectory(prefix="reporter-fuzz-") as tmp:
        work = Path(tmp)
        while time.monotonic() < end:
            kind = kinds[i % len(kinds)]
            n = seed * 1_000_000 + i
            i += 1
            counts[kind] += 1
            name, edit, found, data = one(kind, n, pool, work, runner)
            for argv, why, err in found:
                saved = None
                if keep is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    saved = keep / f"{kind}-{n}-{name}"
                    saved.write_bytes(data)
                findings.append(Finding(kind, n, edit, argv, why, err, saved))
                print(f"[{kind} {n}] {name}: {edit}\n  {' '.join(argv[:2])}: {why}\n  "
                      f"{err.strip()[-400:]}", flush=True)
    print(f"{sum(counts.values())} inputs ({', '.join(f'{k} {v}' for k, v in counts.items())})"
          f" in {seconds:.0f} s: {len(findings)} finding(s)")
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seconds", type=float)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kinds", default="runs,tables,traces")
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    findings = campaign(args.seconds, args.seed, args.kinds.split(","), args.keep)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
