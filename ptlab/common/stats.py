"""Intervals that suit the quantity and the number of samples behind them.

A cell has few repetitions (often 2-5), so the choice of interval matters more
than its arithmetic:

* **Reachability** is k of n repetitions that got through: a binomial
  proportion, with the Wilson score interval (Wilson 1927). Unlike the normal
  ("Wald") interval it stays inside [0, 1] and is not degenerate at k = 0 or n,
  which are the cases a censor produces most.
* **Goodput** is positive and its spread grows with its level, so the interval
  is Student's t on the logarithms, mapped back (a log-normal model): the centre
  is the geometric mean and the bounds are never below 0. The t interval of the
  raw mean with n = 2 (t = 12.7) gave negative lower bounds for most cells.
* **A ratio of goodputs** (a censored cell's over its no-censor baseline) is
  Welch's t on the difference of the logs: the two cells' spreads differ.
* **Latency** is reported as a median, so its interval is the median's own,
  distribution-free one from order statistics (the sign test's binomial
  argument; e.g. Conover, *Practical Nonparametric Statistics*, 3rd ed., §3.2).
  With few samples no pair of order statistics reaches 95 %; the interval is
  then the sample's range and says what level it does reach.

Nothing here needs numpy or scipy: the formulas are short and the tests check
their coverage by simulation (tests/ptlab/common/test_stats.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: The two-sided 95 % normal quantile.
Z95 = 1.96

# Two-sided 95 % Student's t critical values, df 1..30.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t95(df: int) -> float:
    """Two-sided 95 % t critical value; the normal quantile past df 30 (error < 4 %)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T95[df - 1] if df <= len(_T95) else Z95


def _finite(samples: Iterable[float], what: str) -> list[float]:
    xs = [float(x) for x in samples]
    if not xs:
        raise ValueError(f"{what} needs at least one sample")
    if not all(math.isfinite(x) for x in xs):
        raise ValueError(f"{what} samples must be finite")
    return xs


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n (95 % by default)."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At k = 0 or n the exact bound is 0 or 1; rounding must not leave it a hair off.
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


def mean_ci95(samples: Iterable[float]) -> tuple[float, tuple[float, float]]:
    """Mean and Student's t 95 % interval of the mean (one sample: (x, x))."""
    xs = _finite(samples, "mean_ci95")
    n = len(xs)
    mean = math.fsum(xs) / n
    if n == 1:
        return mean, (mean, mean)
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
    half = t95(n - 1) * math.sqrt(var / n)
    return mean, (mean - half, mean + half)


def log_ci95(samples: Iterable[float]) -> tuple[float, tuple[float, float]]:
    """Geometric mean and the 95 % t interval on the log scale, mapped back.

    For positive quantities such as goodput: both bounds are positive, and the
    interval is wider above the centre than below, as the spread of rates is.
    """
    xs = _finite(samples, "log_ci95")
    if min(xs) <= 0:
        raise ValueError("log_ci95 samples must be positive")
    centre, (lo, hi) = mean_ci95(math.log(x) for x in xs)
    return math.exp(centre), (math.exp(lo), math.exp(hi))


def log_ratio_ci95(num: Iterable[float],
                   den: Iterable[float]) -> tuple[float, tuple[float, float] | None]:
    """The ratio of two geometric means and its 95 % interval, or None below two
    samples on either side.

    For goodput under a censor over goodput without one: Welch's t interval
    (Welch 1947) of the difference of the two samples' mean logs, mapped back,
    with the Welch–Satterthwaite degrees of freedom rounded down (so the
    interval is never narrower than the fractional df would give). Welch, not
    the pooled t, because a censor changes the spread as well as the level.
    """
    a, b = _finite(num, "log_ratio_ci95"), _finite(den, "log_ratio_ci95")
    if min(a) <= 0 or min(b) <= 0:
        raise ValueError("log_ratio_ci95 samples must be positive")
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    ma, mb = math.fsum(la) / len(la), math.fsum(lb) / len(lb)
    ratio = math.exp(ma - mb)
    if len(la) < 2 or len(lb) < 2:
        return ratio, None
    va = math.fsum((x - ma) ** 2 for x in la) / (len(la) - 1) / len(la)
    vb = math.fsum((x - mb) ** 2 for x in lb) / (len(lb) - 1) / len(lb)
    if va + vb == 0:
        return ratio, (ratio, ratio)
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1))
    half = t95(max(1, math.floor(df))) * math.sqrt(va + vb)
    return ratio, (math.exp(ma - mb - half), math.exp(ma - mb + half))


@dataclass(frozen=True)
class MedianInterval:
    """A median, the order-statistic interval around it, and the level it reaches."""

    median: float
    low: float
    high: float
    level: float  # the exact coverage of [low, high] for any continuous distribution


def _binom_half_cdf(j: int, n: int) -> float:
    """P(B <= j) for B ~ Binomial(n, 1/2)."""
    return math.fsum(math.comb(n, i) for i in range(j + 1)) / 2 ** n


def median_ci(samples: Iterable[float], level: float = 0.95) -> MedianInterval:
    """The median and the distribution-free interval [x_(j), x_(n+1-j)] around it.

    ``j`` is the largest rank whose interval still covers the population median
    with probability >= ``level``; that probability is 1 - 2·P(B <= j-1) for
    B ~ Binomial(n, 1/2). Below 6 samples even the range covers less than 95 %;
    the range is returned with the level it reaches (n = 5: 93.75 %).
    """
    xs = sorted(_finite(samples, "median_ci"))
    n = len(xs)
    mid = n // 2
    median = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
    best_j, best_level = 1, 1 - 2 * _binom_half_cdf(0, n)
    for j in range(2, (n + 1) // 2 + 1):
        cover = 1 - 2 * _binom_half_cdf(j - 1, n)
        if cover < level:
            break
        best_j, best_level = j, cover
    if n == 1:
        best_level = 0.0
    return MedianInterval(median, xs[best_j - 1], xs[n - best_j], best_level)
