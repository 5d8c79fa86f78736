"""reporter compare: before and after, the regression gate, golden comparisons."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reporter.compare import Step, compare, load_step
from reporter.render.report import render_markdown
from reporter.render.view import LANGUAGES, compare_view
from conftest import FIXTURES, SEEDS, cli

GOLD = Path(__file__).resolve().parent / "gold"
RUNS = FIXTURES / "runs"


def _steps(*runs):
    return [Step(r.target["name"], r.id, r.sections, r) for r in runs]


@pytest.mark.slow
@pytest.mark.parametrize("baseline,rule,faster", [
    ("transformer-bloat", "elementwise-blowup", True),
    ("seq2seq", "copy-heavy", True),
    ("cnn", "dataloader-bound", True),
    # SDPA is not faster than bmm + softmax on this CPU: the gain is on a GPU
    ("transformer", "unfused-attention", False),
])
def test_each_baseline_against_its_fix(live_run, baseline, rule, faster):
    comparison = compare(_steps(live_run(baseline), live_run(f"{baseline}-fixed")))
    assert not comparison.mismatches  # a fix is the same workload
    train = comparison.modes[0]
    assert rule in [f.rule for f in train.overall.resolved]
    # A machine busy while either run was timed gets no verdict: the report says so.
    busy = train.overall.busy
    if faster and not busy:
        assert train.overall.speedup > 1.3 and not train.overall.within_noise
    words = ({"en": "busy", "ru": "занята", "zh": "繁忙"} if busy else
             {"en": "faster", "ru": "быстрее", "zh": "提升"})
    for lang in LANGUAGES:
        text = render_markdown(compare_view(comparison, lang))
        assert f"`{rule}`" in text
        if faster:
            assert words[lang] in text, (busy, text)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_compare_matches_gold(lang):
    steps = [load_step(str(RUNS / n), RUNS) for n in
             ("cpu-transformer-bloat", "cpu-transformer-bloat-fixed")]
    actual = render_markdown(compare_view(compare(steps), lang))
    gold = GOLD / f"compare-bloat.{lang}.md"
    if os.environ.get("REPORTER_UPDATE_GOLD"):
        gold.write_text(actual, encoding="utf-8")
    saved = gold.with_suffix(".actual.md")
    if actual != gold.read_text(encoding="utf-8"):
        saved.write_text(actual, encoding="utf-8")
        pytest.fail(f"differs from {gold}; see {saved}")
    saved.unlink(missing_ok=True)


def _copy_run(src: Path, dest: Path, scale: float = 1.0, spread: float | None = None) -> Path:
    """A stored run whose timed windows are scaled (and optionally spread around their median)."""
    doc = json.loads((src / "run.json").read_text())
    for s in doc["run"]["sections"]:
        windows = s["throughput"]["windows"]
        med = sorted(windows)[len(windows) // 2] * scale
        s["throughput"]["windows"] = ([med * (1 - spread / 2), med, med * (1 + spread / 2)]
                                      if spread is not None else [w * scale for w in windows])
    dest.mkdir(parents=True)
    (dest / "run.json").write_text(json.dumps(doc))
    return dest


def test_regression_gate_both_ways(tmp_path):
    slow, fast = RUNS / "cpu-transformer-bloat", RUNS / "cpu-transformer-bloat-fixed"
    out = ["--out", str(tmp_path / "cmp"), "--lang", "en"]
    assert cli("compare", slow, fast, "--fail-if-slower", "5", *out).code == 0
    res = cli("compare", fast, slow, "--fail-if-slower", "5", *out)
    assert res.code == 3 and "slower than the base" in res.err
    assert (tmp_path / "cmp" / "compare.en.md").is_file()  # the report is written all the same


def test_a_drop_inside_the_noise_is_not_a_regression(tmp_path):
    base = _copy_run(RUNS / "cpu-transformer-bloat-fixed", tmp_path / "base", spread=0.30)
    noisy = _copy_run(RUNS / "cpu-transformer-bloat-fixed", tmp_path / "noisy", scale=0.90,
                      spread=0.30)
    quiet_base = _copy_run(RUNS / "cpu-transformer-bloat-fixed", tmp_path / "qb", spread=0.02)
    quiet = _copy_run(RUNS / "cpu-transformer-bloat-fixed", tmp_path / "q", scale=0.90,
                      spread=0.02)
    out = ["--out", str(tmp_path / "cmp"), "--lang", "en"]
    res = cli("compare", base, noisy, "--fail-if-slower", "5", *out)
    assert res.code == 0, res.err  # 10% slower, but the windows spread ±15%
    assert "no change the measurements can tell" in (tmp_path / "cmp" / "compare.en.md").read_text()
    assert cli("compare", quiet_base, quiet, "--fail-if-slower", "5", *out).code == 3
    assert cli("compare", quiet_base, quiet, "--fail-if-slower", "15", *out).code == 0


def test_a_sequence_and_different_devices(tmp_path):
    steps = [load_step(str(RUNS / n), RUNS) for n in
             ("cpu-transformer-bloat", "cpu-transformer-bloat-fixed", "cuda-seed001")]
    comparison = compare(steps)
    assert "device" in comparison.mismatches and len(comparison.modes[0].pairs) == 2
    text = render_markdown(compare_view(comparison, "ru"))
    assert text.count("\n| 3 |") == 2 and "Внимание" in text


def test_compare_tables_and_json(tmp_path):
    seed = next(SEEDS.glob("001_*.txt"))
    cuda = RUNS / "cuda-seed001"
    res = cli("compare", cuda, seed, "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["modes"][0]["basis"] == "device"
    assert doc["modes"][0]["speedup"] is None  # the tables carry no timed windows


@pytest.mark.parametrize("argv,code,words", [
    (["compare", "only-one", "no-such-run"], 2, ["no run"]),
    (["compare", str(RUNS / "cpu-tensor-ops")], 2, ["at least two"]),
    (["compare", str(RUNS / "cpu-tensor-ops"), str(RUNS / "cpu-tensor-ops"),
      "--fail-if-slower", "-3"], 2, ["percentage"]),
    (["compare", str(RUNS / "cpu-transformer-bloat"), str(RUNS / "cpu-tensor-ops")], 2,
     ["no profiled mode in common"]),
])
def test_compare_bad_input(tmp_path, argv, code, words):
    res = cli(*argv, "--runs", tmp_path)
    assert res.code == code, res.err
    assert len(res.err.strip().splitlines()) == 1 and all(w in res.err for w in words)
