"""The statistics a throughput needs: the median's confidence interval, and outliers.

The interval is the distribution-free one of order statistics: with n windows,
the median lies between the l-th smallest and the l-th largest with the
probability that a Binomial(n, 1/2) falls in [l, n - l], whatever the
distribution of the windows (no normality, no bootstrap randomness). With few
windows no pair reaches 95%: then the widest one (min, max) is used and its
real confidence is reported with it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from math import comb


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    confidence: float  # the probability that the median lies in [low, high]

    def half_width(self, centre: float) -> float:
        """Half the interval's width, relative to ``centre`` (the median)."""
        return (self.high - self.low) / 2 / centre if centre else 0.0


def median_interval(values: list[float], level: float = 0.95) -> Interval | None:
    """The order-statistics confidence interval of the median of ``values``."""
    n = len(values)
    if n < 2:
        return None
    xs = sorted(values)
    best = 1  # ranks l = 1 .. n // 2, from the widest pair inwards
    for rank in range(1, n // 2 + 1):
        if _coverage(n, rank) >= level:
            best = rank
        else:
            break
    return Interval(xs[best - 1], xs[n - best], _coverage(n, best))


def _coverage(n: int, rank: int) -> float:
    """P(rank <= Binomial(n, 1/2) <= n - rank): the median is between the rank-th smallest
    and the rank-th largest of n values."""
    tail: float = sum(comb(n, k) for k in range(rank)) / 2 ** n
    return 1.0 - 2.0 * tail


def outliers(values: list[float]) -> list[int]:
    """Indexes of values beyond 1.5 interquartile ranges from the quartiles (Tukey)."""
    if len(values) < 4:
        return []
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return [i for i, v in enumerate(values) if v < lo or v > hi]
