"""WeightedDist: seeded tables, CSPRNG sampling. Statistical and structural checks only."""

import collections
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.common.probdist import WeightedDist, iat_seed

seeds = st.binary(min_size=24, max_size=24)


@settings(max_examples=30, deadline=None)
@given(seeds, st.booleans())
def test_table_is_deterministic_per_seed(seed, biased):
    a = WeightedDist(seed, 0, 1448, biased)
    b = WeightedDist(seed, 0, 1448, biased)
    assert (a.values, a.weights, a.prob, a.alias) == (b.values, b.weights, b.prob, b.alias)
    assert 1 <= len(a.values) <= 100
    assert len(set(a.values)) == len(a.values)
    assert all(0 <= v <= 1448 for v in a.values)
    assert all(0.0 <= p <= 1.0 for p in a.prob)
    assert all(0 <= i < len(a.values) for i in a.alias)


def test_different_seeds_give_different_tables():
    tables = {tuple(WeightedDist(bytes([i]) * 24, 0, 1448, False).values) for i in range(20)}
    assert len(tables) == 20


@settings(max_examples=20, deadline=None)
@given(seeds, st.integers(0, 2000), st.integers(1, 300), st.booleans())
def test_samples_stay_in_range(seed, lo, span, biased):
    dist = WeightedDist(seed, lo, lo + span, biased)
    for _ in range(50):
        assert lo <= dist.sample() <= lo + span


def test_samples_follow_the_table():
    # Pick a seed whose table has several values, then check frequencies loosely.
    for i in range(100):
        dist = WeightedDist(hashlib.sha256(bytes([i])).digest()[:24], 0, 1448, False)
        if 5 <= len(dist.values) <= 30:
            break
    total = sum(dist.weights)
    expected = {dist.min_value + v: w / total for v, w in zip(dist.values, dist.weights,
                                                              strict=True)}
    n = 40000
    counts = collections.Counter(dist.sample() for _ in range(n))
    assert set(counts) <= set(expected)
    for value, p in expected.items():
        assert abs(counts[value] / n - p) < 0.02 + 0.1 * p, (value, p, counts[value] / n)


def test_biased_weights_decay():
    # ScrambleSuit-style weights: each is a fraction of what is left, so they sum to at most 1.
    for i in range(20):
        dist = WeightedDist(bytes([i]) * 24, 0, 1448, True)
        assert sum(dist.weights) <= 1.0 + 1e-9
        assert all(w >= 0.0 for w in dist.weights)


def test_reset_switches_to_the_new_seeds_table():
    a = WeightedDist(b"\x01" * 24, 0, 1448, False)
    b = WeightedDist(b"\x02" * 24, 0, 1448, False)
    a.reset(b"\x02" * 24)
    assert (a.values, a.prob, a.alias) == (b.values, b.prob, b.alias)


def test_iat_range_and_bad_bounds():
    dist = WeightedDist(hashlib.sha256(b"seed").digest()[:24], 0, 100, True)
    assert all(0 <= dist.sample() <= 100 for _ in range(200))
    assert str(dist).startswith("[ ") and str(dist).endswith("]")
    with pytest.raises(ValueError):
        WeightedDist(bytes(24), 5, 5, False)


def test_iat_seed_is_truncated_sha256():
    seed = bytes(range(24))
    assert iat_seed(seed) == hashlib.sha256(seed).digest()[:24]
