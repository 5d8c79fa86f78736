"""The statistics a throughput needs: the median's confidence interval, and outliers.

The interval is the distribution-free one of order statistics: with n windows,
the median lies between the l-th smallest and the l-th largest with the
probability that a Binomial(n, 1/2) falls in [l, n - l], whatever the
distribution of the windows (no normality, no bootstrap randomness). With few
windows no pair reaches 95%: then the widest one (min, max) is used and its
real confidence is reported with it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    confidence: float  # the probability that the median lies in [low, high]

    def half_width(self, centre: float) -> float:
        """Half the interval's width, relative to ``centre`` (the median)."""
        return (self.high - self.low) / 2 / centre if centre else 0.0


def median_interval(values: list[float], level: float = 0.95) -> Interval | None:
    """The order-statistics confidence interval of the median of ``values``: linear in
    their number (one pass over the binomial's lower tail)."""
    n = len(values)
    if n < 2:
        return None
    xs = sorted(values)
    best, best_coverage = 1, 0.0  # ranks l = 1 .. n // 2, from the widest pair inwards
    for rank, coverage in _coverages(n):
        if rank > 1 and coverage < level:
            break
        best, best_coverage = rank, coverage
        if coverage < level:  # not even min-max reaches it: that pair, with its confidence
            break
    return Interval(xs[best - 1], xs[n - best], best_coverage)


# Up to this many values the coverages are exact (big integers, each term from the one
# before); beyond it, floats from the log-gamma function: a big integer per term would make
# the loop quadratic in n.
EXACT_UP_TO = 10_000


def _coverages(n: int) -> Iterator[tuple[int, float]]:
    """(rank, P(rank <= Binomial(n, 1/2) <= n - rank)) for rank = 1 .. n // 2: the median
    is between the rank-th smallest and the rank-th largest of n values."""
    if n <= EXACT_UP_TO:
        term, tail, whole = 1, 0, 2 ** n  # term: comb(n, k); tail: the sum for k < rank
        for rank in range(1, n // 2 + 1):
            tail += term
            term = term * (n - rank + 1) // rank
            yield rank, 1.0 - 2.0 * (tail / whole)
        return
    log_half = n * math.log(2.0)
    ftail = 0.0
    for rank in range(1, n // 2 + 1):
        k = rank - 1
        ftail += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                          - log_half)
        yield rank, 1.0 - 2.0 * ftail
def outliers(values: list[float]) -> list[int]:
    """Indexes of values beyond 1.5 interquartile ranges from the quartiles (Tukey)."""
    if len(values) < 4:
        return []
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return [i for i, v in enumerate(values) if v < lo or v > hi]
