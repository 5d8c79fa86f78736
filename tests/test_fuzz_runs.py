"""A short seeded mutation fuzz (bench/fuzz.py) over stored runs, profiler tables and
Chrome traces, in this process through reporter.cli.main: no input ends in an internal
error or a traceback, in more than one line on stderr, or with an exit code other than 0
or 2 (1 only for [too-long] or [memory]); no report prints Python's None, nan or inf.
The same inputs, seeded, each time; ``bench/fuzz.py SECONDS`` runs a longer campaign."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from conftest import ROOT

INPUTS = {"runs": 300, "tables": 400, "traces": 400}  # about 40 s in all on 2 cores
# The fast set mutates the first of them (about 5 s in all); the slow set the rest.
FAST = {"runs": 40, "tables": 60, "traces": 40}


def _fuzz():
    spec = importlib.util.spec_from_file_location("reporter_bench_fuzz",
                                                  ROOT / "bench" / "fuzz.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fuzz():
    return _fuzz()


@pytest.fixture(scope="module")
def pool(fuzz):
    return fuzz.seeds(corpus=False)  # the repository's own seeds: the same inputs anywhere


@pytest.mark.parametrize("kind, first, end", [
    *[pytest.param(k, 0, FAST[k], id=k) for k in INPUTS],
    *[pytest.param(k, FAST[k], INPUTS[k], id=f"{k}-rest", marks=pytest.mark.slow)
      for k in INPUTS]])
def test_mutated_inputs_end_in_one_line_or_a_report(fuzz, pool, kind, first, end, tmp_path):
    findings = []
    for n in range(first, end):
        name, edit, found, _ = fuzz.one(kind, n, pool, tmp_path)
        findings += [f"{kind} {n} ({name}: {edit[:120]}): {' '.join(argv[:2])}: {why}: "
                     f"{err.strip()[-300:]}" for argv, why, err in found]
    assert not findings, "\n".join(findings)


def test_the_fuzzer_flags_what_it_should(fuzz, tmp_path):
    """The checks themselves: an internal error, a second stderr line, exit 1 without
    [too-long], and 'stream None' in a report are each flagged; a one-line refusal is not."""
    Outcome = fuzz.Outcome
    assert fuzz.problems(Outcome([], 1, "reporter: internal error: TypeError: x\n"))
    assert fuzz.problems(Outcome([], 2, "reporter: error [bad-run]: a\nand more\n"))
    assert fuzz.problems(Outcome([], 1, "reporter: error [template]: x\n"))
    assert not fuzz.problems(Outcome([], 1, "reporter: error [too-long]: x\n"))
    assert not fuzz.problems(Outcome([], 2, "reporter: error [bad-run]: x\n"))
    (tmp_path / "report.en.md").write_text("| stream None | 3.44 μs |\n")
    assert fuzz._report_problems(tmp_path, "{}")
    assert not fuzz._report_problems(tmp_path, '{"label": "None"}')
    assert Path(fuzz.__file__).name == "fuzz.py"
