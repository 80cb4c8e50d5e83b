"""The intervals: their properties on any input, and their coverage by simulation."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ptlab.common import stats

positive = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_stays_in_unit_interval_and_holds_the_estimate(kn):
    k, n = kn
    lo, hi = stats.wilson(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert (lo == 0.0) == (k == 0) and (hi == 1.0) == (k == n)


def test_wilson_known_values():
    # Wilson (1927); the textbook example 0 of 10 -> [0, 0.278], 5 of 10 -> [0.237, 0.763].
    assert stats.wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert stats.wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    with pytest.raises(ValueError):
        stats.wilson(3, 2)


@given(st.lists(positive, min_size=1, max_size=30))
def test_goodput_interval_is_never_below_zero(xs):
    centre, (lo, hi) = stats.log_ci95(xs)
    assert 0 < lo <= centre * (1 + 1e-9) and centre <= hi * (1 + 1e-9)
    assert min(xs) * (1 - 1e-9) <= centre <= max(xs) * (1 + 1e-9)


def test_the_reported_case_no_longer_goes_negative():
    # tor+meek x none: two repetitions, 67.33 "[-282.81, 417.48]" with the raw-mean t interval.
    xs = [39.8, 94.86]
    assert stats.mean_ci95(xs)[1][0] < 0
    centre, (lo, hi) = stats.log_ci95(xs)
    assert lo > 0 and lo < centre < hi


def test_log_interval_refuses_non_positive_samples():
    with pytest.raises(ValueError, match="positive"):
        stats.log_ci95([1.0, 0.0])


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=40))
def test_median_interval_brackets_the_median(xs):
    m = stats.median_ci(xs)
    assert min(xs) <= m.low <= m.median <= m.high <= max(xs)
    assert 0.0 <= m.level <= 1.0


def test_median_interval_levels():
    assert stats.median_ci(range(5)).level == pytest.approx(1 - 2 / 32)  # the range only
    ten = stats.median_ci(range(10))  # ranks 2 and 9: 1 - 2*(1+10)/1024
    assert (ten.low, ten.high) == (1, 8) and ten.level == pytest.approx(0.978515625)


COVERAGE_TRIALS = 3000
TOLERANCE = 0.02  # about 2.5 binomial standard errors at 3000 trials


def test_goodput_interval_covers_95_percent_of_log_normal_rates():
    rng = random.Random(1)
    mu, sigma = math.log(40.0), 0.4
    true_centre = math.exp(mu)  # the median of a log-normal, which the interval targets
    for n in (2, 3, 5):
        hits = 0
        for _ in range(COVERAGE_TRIALS):
            _, (lo, hi) = stats.log_ci95(rng.lognormvariate(mu, sigma) for _ in range(n))
            hits += lo <= true_centre <= hi
        assert abs(hits / COVERAGE_TRIALS - 0.95) < TOLERANCE, (n, hits)


def test_median_interval_covers_at_least_its_stated_level():
    rng = random.Random(2)
    true_median = math.log(2)  # of an exponential(1): skewed, like latency
    for n in (6, 10, 25):
        hits, stated = 0, stats.median_ci([rng.expovariate(1) for _ in range(n)]).level
        for _ in range(COVERAGE_TRIALS):
            m = stats.median_ci([rng.expovariate(1) for _ in range(n)])
            hits += m.low <= true_median <= m.high
        assert stated >= 0.95
        assert hits / COVERAGE_TRIALS > stated - TOLERANCE, (n, hits, stated)


def test_ratio_interval_covers_at_least_95_percent_when_the_spreads_differ():
    rng = random.Random(4)
    true_ratio = 0.25  # of the two log-normals' medians
    for (n_num, s_num), (n_den, s_den) in (((3, 0.6), (3, 0.1)), ((2, 0.3), (5, 0.3)),
                                           ((5, 0.2), (3, 0.8))):
        hits = 0
        for _ in range(COVERAGE_TRIALS):
            num = [rng.lognormvariate(math.log(10.0), s_num) for _ in range(n_num)]
            den = [rng.lognormvariate(math.log(40.0), s_den) for _ in range(n_den)]
            _, ci = stats.log_ratio_ci95(num, den)
            assert ci is not None
            hits += ci[0] <= true_ratio <= ci[1]
        # Flooring Welch's df makes it conservative: at least 95 %, never far above.
        assert 0.95 - TOLERANCE < hits / COVERAGE_TRIALS < 0.995, (n_num, n_den, hits)


def test_ratio_interval_needs_two_samples_each_side():
    ratio, ci = stats.log_ratio_ci95([10.0], [40.0, 41.0])
    assert ratio == pytest.approx(10 / math.sqrt(40 * 41)) and ci is None
    assert stats.log_ratio_ci95([2.0, 2.0], [4.0, 4.0]) == (0.5, (0.5, 0.5))
    with pytest.raises(ValueError):
        stats.log_ratio_ci95([0.0, 1.0], [1.0, 2.0])


@given(st.lists(positive, min_size=2, max_size=8), st.lists(positive, min_size=2, max_size=8))
def test_ratio_interval_holds_the_ratio(num: list[float], den: list[float]) -> None:
    ratio, ci = stats.log_ratio_ci95(num, den)
    assert ci is not None and ci[0] <= ratio * (1 + 1e-9) and ratio <= ci[1] * (1 + 1e-9)
    assert ratio == pytest.approx(stats.log_ci95(num)[0] / stats.log_ci95(den)[0])


def wilson_coverage(p: float, n: int) -> float:
    """The exact probability that the interval of k ~ Binomial(n, p) holds p."""
    return math.fsum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)
                     if stats.wilson(k, n)[0] <= p <= stats.wilson(k, n)[1])


@pytest.mark.parametrize("n", [5, 10, 20, 50])
def test_wilson_coverage_is_95_percent_on_average_and_never_far_below(n):
    # Wilson's coverage oscillates with p (Brown, Cai & DasGupta 2001, Fig. 4); over
    # p in [0.2, 0.8] its mean is 95 % within 1 point and its minimum above 91 %.
    grid = [i / 100 for i in range(20, 81)]
    cover = [wilson_coverage(p, n) for p in grid]
    assert abs(math.fsum(cover) / len(cover) - 0.95) < 0.01
    assert min(cover) > 0.91


def test_wilson_coverage_by_simulation_matches_the_exact_sum():
    rng = random.Random(3)
    p, n = 0.263, 20  # the FET paper's blocking probability
    hits = 0
    for _ in range(COVERAGE_TRIALS):
        k = sum(rng.random() < p for _ in range(n))
        lo, hi = stats.wilson(k, n)
        hits += lo <= p <= hi
    assert abs(hits / COVERAGE_TRIALS - wilson_coverage(p, n)) < TOLERANCE


# --- the t interval of a mean ------------------------------------------------------------


def test_ci_known_values() -> None:
    mean, (lo, hi) = stats.mean_ci95([1, 2, 3, 4, 5])
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)
    assert mean == 3.0
    assert lo == pytest.approx(3 - half)
    assert hi == pytest.approx(3 + half)


def test_ci_two_samples_uses_df1() -> None:
    mean, (lo, hi) = stats.mean_ci95([0.0, 2.0])
    # sd = sqrt(2), se = 1, t(1) = 12.706
    assert mean == 1.0
    assert (hi - lo) / 2 == pytest.approx(12.706)


def test_ci_large_n_uses_normal() -> None:
    xs = [0.0, 1.0] * 20  # n = 40, df = 39 > 30
    mean, (lo, hi) = stats.mean_ci95(xs)
    sd = math.sqrt(sum((x - 0.5) ** 2 for x in xs) / 39)
    assert (hi - lo) / 2 == pytest.approx(1.96 * sd / math.sqrt(40))
    assert stats.t95(30) == 2.042 and stats.t95(31) == 1.96


def test_ci_single_sample_is_degenerate() -> None:
    assert stats.mean_ci95([7.5]) == (7.5, (7.5, 7.5))


def test_ci_rejects_empty_and_nan() -> None:
    with pytest.raises(ValueError):
        stats.mean_ci95([])
    with pytest.raises(ValueError):
        stats.mean_ci95([1.0, float("nan")])


@given(st.lists(st.floats(min_value=-1e9, max_value=1e9), min_size=1, max_size=60))
def test_ci_properties(xs: list[float]) -> None:
    mean, (lo, hi) = stats.mean_ci95(xs)
    assert hi - lo >= 0
    assert lo <= mean <= hi
    assert min(xs) - 1e-6 * (1 + abs(min(xs))) <= mean <= max(xs) + 1e-6 * (1 + abs(max(xs)))


@given(st.floats(min_value=-1e6, max_value=1e6), st.integers(min_value=2, max_value=40))
def test_ci_constant_samples_have_zero_width(x: float, n: int) -> None:
    mean, (lo, hi) = stats.mean_ci95([x] * n)
    assert mean == pytest.approx(x)
    assert hi - lo == pytest.approx(0.0, abs=1e-9 * (1 + abs(x)))
