"""The broker's discrete Laplace mechanism, clamping and budget ledger."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.dpmetrics import (
    BudgetExceeded,
    Histogram,
    Ledger,
    bernoulli_exp,
    discrete_laplace,
    guarantee,
    variance,
)

N = 20_000


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(2), Fraction(5)])
def test_noise_scale_matches_delta_over_epsilon(scale):
    """N = 20,000 seeded samples: the sample variance lies within 5 standard errors of
    the exact variance 2q/(1-q)², q = e^(-1/scale); the standard error of a sample
    variance is sqrt((μ4 - σ⁴)/N), with μ4 computed from the exact distribution."""
    rng = random.Random(1)
    xs = [discrete_laplace(scale, rng) for _ in range(N)]
    q = math.exp(-1 / float(scale))
    norm = (1 - q) / (1 + q)
    mu4 = 2 * sum(norm * q ** k * k ** 4 for k in range(1, 2000))
    var = variance(scale)
    se_var = math.sqrt((mu4 - var ** 2) / N)
    sample_var = sum(x * x for x in xs) / N
    assert abs(sample_var - var) < 5 * se_var
    assert abs(sum(xs) / N) < 5 * math.sqrt(var / N)
    p0 = xs.count(0) / N
    assert abs(p0 - norm) < 5 * math.sqrt(norm * (1 - norm) / N)


def test_bernoulli_exp_is_exact_in_distribution():
    rng = random.Random(2)
    for gamma in (Fraction(0), Fraction(1, 3), Fraction(5, 2)):
        p = math.exp(-float(gamma))
        hits = sum(bernoulli_exp(gamma, rng) for _ in range(N))
        assert abs(hits / N - p) < 5 * math.sqrt(p * (1 - p) / N) + 1e-9


def test_clamping_bounds_one_units_contribution_and_sets_delta():
    h = Histogram(["CN", "IR", "RU", "??"], max_contribution=2)
    for key in ("CN", "IR", "RU", "CN"):
        h.add("198.18.0.2", key)
    h.add("198.18.0.3", "RU", amount=5)
    assert sum(h.counts.values()) == 4 and h.clamped == 5
    assert h.counts == {"CN": 1, "IR": 1, "RU": 2}
    with pytest.raises(KeyError):
        h.add("x", "US")
    # Δ enters the scale: Δ = 4 at ε = 1 is four times as noisy as Δ = 1.
    wide, narrow = Histogram(["a"], 4), Histogram(["a"], 1)
    rng = random.Random(3)
    spread = [sum(abs(next(iter(hh.release(Fraction(1), Ledger(Fraction(N)), rng).values())))
                  for _ in range(2000)) for hh in (wide, narrow)]
    assert 2.5 < spread[0] / spread[1] < 6


def test_the_ledger_refuses_an_over_budget_release_and_publishes_nothing():
    h = Histogram(["a", "b"])
    ledger = Ledger(Fraction(1))
    assert h.release(Fraction(1, 2), ledger, random.Random(4)).keys() == {"a", "b"}
    h.release(Fraction(1, 2), ledger, random.Random(4))
    with pytest.raises(BudgetExceeded, match="exceed"):
        h.release(Fraction(1, 100), ledger, random.Random(4))
    assert ledger.spent == 1


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 50)),
       st.integers(1, 1000))
def test_releases_are_non_negative_ints_over_the_fixed_keys(counts, seed):
    h = Histogram(["a", "b", "c"], max_contribution=100)
    for i, (k, n) in enumerate(counts.items()):
        h.add(f"u{i}", k, n)
    out = h.release(Fraction(1, 10), Ledger(Fraction(1)), random.Random(seed))
    assert set(out) == {"a", "b", "c"}
    assert all(isinstance(v, int) and v >= 0 for v in out.values())


def test_the_guarantee_states_unit_delta_and_scale():
    text = guarantee(Fraction(1, 2), 1, "day")
    assert "0.5-differentially private for one source address" in text and "1/0.5" in text
