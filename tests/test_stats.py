"""The median's interval and the decisions taken on it: the report's verdict, the CI gate."""

from __future__ import annotations

import random

import pytest

from reporter.compare import Step, compare, regression
from reporter.model.profile import Op, Profile
from reporter.model.run import Section, Throughput
from reporter.model.stats import median_interval, outliers


def test_the_interval_of_the_median_and_its_confidence():
    assert median_interval([1.0]) is None
    five = median_interval([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (five.low, five.high) == (1.0, 5.0) and five.confidence == pytest.approx(1 - 2 / 32)
    xs = list(range(1, 21))  # n = 20: the 6th smallest and the 6th largest (95.9%)
    twenty = median_interval([float(x) for x in xs])
    assert (twenty.low, twenty.high) == (6.0, 15.0)
    assert twenty.confidence == pytest.approx(0.9586, abs=1e-4)


def test_the_interval_covers_the_median_as_often_as_it_says():
    rng = random.Random(1)
    hits, trials = 0, 2000
    for _ in range(trials):
        values = [rng.lognormvariate(0.0, 0.5) for _ in range(15)]  # true median: 1.0
        iv = median_interval(values)
        hits += iv.low <= 1.0 <= iv.high
    assert hits / trials >= 0.95 - 0.015


def test_outliers_are_found_not_dropped():
    values = [100.0, 101.0, 99.0, 100.5, 40.0, 100.2]
    assert outliers(values) == [4]
    t = Throughput(windows=values, steps_per_window=4, profiled=90.0)
    assert t.outliers == [4] and len(t.windows) == 6


def _step(name: str, windows: list[float]) -> Step:
    p = Profile(label="train", self_cpu_us=1000.0,
                ops=[Op("aten::mm", calls=1, self_cpu_us=1000.0, cpu_total_us=1000.0)])
    section = Section("train", Throughput(windows, 4, 0.0), p)
    return Step(name, name, [section], None)


def _windows(centre: float, n: int = 20, spread: float = 0.02, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [centre * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


@pytest.mark.parametrize("after,verdict,fails", [
    (120.0, "faster", False),   # clear speed-up
    (80.0, "slower", True),     # clear slowdown, beyond a 5% limit
    (96.0, "slower", False),    # clearly slower, but by less than the 5% limit
    (100.5, "noise", False),    # the intervals overlap: nothing to tell
])
def test_verdict_and_gate_follow_the_intervals(after, verdict, fails):
    comparison = compare([_step("base", _windows(100.0, seed=1)),
                          _step("new", _windows(after, seed=2))])
    p = comparison.modes[0].overall
    told = "noise" if p.within_noise else ("faster" if p.speedup > 1 else "slower")
    assert told == verdict
    assert p.ratio.low <= p.speedup <= p.ratio.high
    assert regression(comparison, 5.0)[0] == fails


def test_a_noisy_drop_does_not_fail_the_gate():
    # 10% slower in the medians, but windows spread +-40%: the interval holds 0.95
    comparison = compare([_step("base", _windows(100.0, n=7, spread=0.4, seed=3)),
                          _step("new", _windows(90.0, n=7, spread=0.4, seed=4))])
    p = comparison.modes[0].overall
    assert p.ratio.high > 0.95
    assert regression(comparison, 5.0)[0] is False
