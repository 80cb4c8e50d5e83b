"""Wang et al.'s entropy-distribution and length test (liangw89/obfs-detection entropy.py)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.detectors.ml import entropy_test
from censor_sim.detectors.stats import block_entropy, block_entropy_distribution


def rand(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def test_distribution_is_exact_and_sums_to_one():
    dist = block_entropy_distribution(8)
    assert math.isclose(math.fsum(p for _, p in dist), 1.0, rel_tol=1e-12)
    # All 8 bytes distinct: 256*255*...*249 / 256^8.
    assert dist[-1][0] == 3.0
    assert math.isclose(dist[-1][1], math.perm(256, 8) / 256 ** 8, rel_tol=1e-12)
    # A constant block: 256 strings of 256^8.
    assert dist[0] == (0.0, 256 / 256 ** 8)


def test_sample_values_land_on_the_support_points():
    support = {h for h, _ in block_entropy_distribution(8)}
    assert set(block_entropy(rand(4096, 1), 8)) <= support


def test_kolmogorov_series_known_values():
    # Kolmogorov's limiting distribution: P(K > 1.36) ≈ 0.049, P(K > 1.0) ≈ 0.27.
    assert math.isclose(entropy_test.kolmogorov_sf(1.3581), 0.05, abs_tol=2e-4)
    assert math.isclose(entropy_test.kolmogorov_sf(1.0), 0.26999967, abs_tol=1e-6)
    assert entropy_test.kolmogorov_sf(0.0) == 1.0
    assert entropy_test.kolmogorov_sf(5.0) < 1e-20


def test_matches_scipy_two_sample_ks_against_a_large_random_reference():
    stats = pytest.importorskip("scipy.stats")
    reference = block_entropy(rand(1 << 20, 99), 8)
    for seed in range(5):
        msg = rand(1448, seed)
        ours = entropy_test.test_message(msg)
        theirs = stats.ks_2samp(block_entropy(msg, 8), reference)
        assert abs(ours.ks_d - theirs.statistic) < 0.01  # the reference sample's own noise
        assert ours.random_looking == (theirs.pvalue >= 0.1)


def test_random_messages_are_flagged_and_structured_ones_are_not():
    assert all(entropy_test.test_message(rand(n, n)).random_looking
               for n in (149, 300, 1448, 4000))
    http = b"GET /index.html HTTP/1.1\r\nHost: www.example.com\r\nAccept: */*\r\n\r\n" * 4
    assert not entropy_test.test_message(http).random_looking
    # A TLS ClientHello: random fields between mostly constant structure.
    hello = (bytes.fromhex("16030102000100") + rand(32, 1) + b"\x20" + rand(32, 2)
             + bytes.fromhex("003e130213031301c02cc030") * 5 + b"\x00" * 150)
    assert not entropy_test.test_message(hello).random_looking


def test_length_rule_149_bytes():
    assert not entropy_test.test_message(rand(148, 3)).tested
    v = entropy_test.test_message(rand(149, 3))
    assert v.tested and v.blocks == 18
    # Only the first 2048 bytes are read.
    assert entropy_test.test_message(rand(5000, 4)).blocks == 256


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000))
def test_any_bytes_give_a_verdict(data):
    v = entropy_test.test_message(data)
    assert 0.0 <= v.p_value <= 1.0 and 0.0 <= v.ks_d <= 1.0
    assert v.random_looking <= v.tested
