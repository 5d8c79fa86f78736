"""zero-grad-fill (issue #66, the Tuning Guide's `zero_grad(set_to_none=True)`): a user's
own training loop that zeroes its gradients in place, profiled with torch.profiler as the
user would (tests/models/planted_zero_grad.py), read from its Chrome trace and from its
operator table; its fix (``set_to_none=True``) gets no such finding. The fills' time is
checked against the trace's raw events, not against reporter. Whether the fix saves what
the finding says is bench/imported.py's (timed, not tested)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from conftest import cli
from reporter.analyze.findings import RULES

sys.path.insert(0, str(Path(__file__).parent / "models"))
from planted_zero_grad import loop, profiled  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zero-grad")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {fix: profiled(loop(set_to_none=fix), folder, f"set_to_none_{fix}")
                for fix in (False, True)}
    finally:
        torch.set_num_threads(threads)


def _findings(path: Path) -> dict:
    res = cli("analyze", path, "--json")
    assert res.code == 0, res.err
    return {f["rule"]: f for f in json.loads(res.out)["profiles"][0]["findings"]}


def _raw_fills_us(trace: Path) -> tuple[float, int]:
    """The fills' time and count, by hand from the trace: the ``aten::zero_`` events that
    lie inside an ``Optimizer.zero_grad#`` event of the same thread."""
    events = [e for e in json.loads(trace.read_text())["traceEvents"]
              if e.get("ph") == "X"]
    marks = [e for e in events if e["name"].startswith("Optimizer.zero_grad#")]
    fills = [e for e in events if e["name"] == "aten::zero_"
             and any(m["tid"] == e["tid"] and m["ts"] <= e["ts"]
                     and e["ts"] + e["dur"] <= m["ts"] + m["dur"] for m in marks)]
    return sum(e["dur"] for e in fills), len(fills)


def test_gradients_zeroed_in_place_are_found_in_a_users_trace_and_table(exported):
    trace, table = exported[False]
    by_trace, by_table = _findings(trace)["zero-grad-fill"], _findings(table)["zero-grad-fill"]
    fills_us, n = _raw_fills_us(trace)
    params = 2 * 8  # the loop's 8 layers, a weight and a bias each
    assert n == by_trace["filled"] == params * by_trace["steps"]
    # the zero_grad mark's time in what it calls is the fills, and little else
    assert 0.999 * fills_us <= by_trace["zero_us"] <= 1.25 * fills_us
    assert by_trace["share"] > RULES["zero-grad-fill"].limits["share"]
    # the table is the same profile, aggregated: the same share
    assert by_table["share"] == pytest.approx(by_trace["share"], rel=0.02)
    # the worth: at least the fills, at most the fills and the additions into them
    assert by_trace["saving_low"] == pytest.approx(by_trace["zero_us"] / 1e3
                                                   / by_trace["steps"], rel=0.01)
    assert by_trace["saving_high"] > by_trace["saving_low"]


def test_gradients_freed_get_no_such_finding(exported):
    for path in exported[True]:
        assert "zero-grad-fill" not in _findings(path)


@pytest.mark.parametrize("lang,words", [("en", "set_to_none=True"),
                                        ("ru", "освобождаются"), ("zh", "释放")])
def test_the_finding_reads_in_every_language_with_the_cpu_allocators_caveat(
        exported, tmp_path, lang, words):
    trace, _ = exported[False]
    res = cli("analyze", trace, "--lang", lang, "--out", tmp_path)
    assert res.code == 0, res.err
    text = next(tmp_path.glob("*.md")).read_text(encoding="utf-8")
    assert words in text and "MALLOC_MMAP_THRESHOLD_" in text
