"""The FET exemption rules (Wu et al. 2023, Algorithm 1) pinned on both sides of each threshold."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.detectors import fet

# Bytes with a given popcount that are not printable ASCII: fillers that
# leave Ex2–Ex5 untouched while Ex1 is being tested.
NP4 = bytes([0x0F])      # popcount 4
NP3 = bytes([0x07])      # popcount 3
NP5 = bytes([0x1F])      # popcount 5
NP8 = bytes([0xFF])      # popcount 8


def test_ex1_popcount_edges():
    # 50 bytes: 30×4 + 20×3 = 180 bits → 3.60 not exempt; shift toward 3.40.
    assert fet.exemption(NP4 * 20 + NP3 * 30) == "ex1"          # 3.40 exactly: exempt
    assert fet.exemption(NP4 * 21 + NP3 * 29) is None            # 3.42: not exempt
    assert fet.exemption(NP4 * 21 + NP5 * 29) is None            # 4.58: not exempt
    assert fet.exemption(NP4 * 20 + NP5 * 30) == "ex1"          # 4.60 exactly: exempt


def test_ex2_six_leading_printable():
    body = NP4 * 60
    assert fet.exemption(b"abcde" + body) is None
    assert fet.exemption(b"abcdef" + body) == "ex2"


def test_ex3_more_than_half_printable():
    # Printable bytes separated so that no run reaches Ex4, none leading (Ex2).
    half = (NP4 + b"z") * 25                 # exactly 50 %
    assert fet.features(half).printable_fraction == 0.5
    assert fet.exemption(half) is None
    more = (NP4 + b"z") * 24 + b"zz"         # 26/50 = 52 %
    assert fet.features(more).printable_fraction == 0.52
    assert fet.exemption(more) == "ex3"


def test_ex4_printable_run_longer_than_20():
    filler = NP4 * 60
    assert fet.exemption(NP4 + b"A" * 20 + filler) is None
    assert fet.exemption(NP4 + b"A" * 21 + filler) == "ex4"


def test_ex5_tls_and_http_prefixes():
    body = NP4 * 60
    assert fet.exemption(b"\x16\x03\x09" + body) == "ex5"
    assert fet.exemption(b"\x17\x03\x01" + body) == "ex5"
    # The paper says [\x00-\x09]; the authors' detect.py accepts up to 0x0f: we follow the paper.
    assert fet.exemption(b"\x16\x03\x0a" + body) is None
    for prefix in (b"GET ", b"PUT ", b"POST ", b"HEAD "):
        assert fet.exemption(prefix + body) == "ex5"
    assert fet.exemption(b"GET" + body) is None


def test_forty_single_byte_patterns_are_blocked():
    """censors.md §2.3: 40 of 256 repeated bytes are not exempt, all with popcount 4."""
    blocked = [b for b in range(256) if fet.exemption(bytes([b]) * 100) is None]
    assert len(blocked) == 40
    assert all(bin(b).count("1") == 4 for b in blocked)


def test_first_packet_of_one_printable_byte_is_exempt():
    assert fet.exemption(b"\x21") == "ex1"


@pytest.mark.parametrize("length, p_not_exempt", [(8, 0.641), (16, 0.823), (32, 0.940),
                                                  (50, 0.972), (100, 0.994), (200, 0.997)])
def test_random_payload_exemption_rates_match_the_derived_table(length, p_not_exempt):
    rng = random.Random(length)
    n = 4000
    hits = sum(fet.exemption(rng.randbytes(length)) is None for _ in range(n))
    band = 4 * math.sqrt(p_not_exempt * (1 - p_not_exempt) / n) + 0.002
    assert abs(hits / n - p_not_exempt) <= band, (length, hits / n)


def test_empty_payload_is_an_error():
    with pytest.raises(ValueError):
        fet.exemption(b"")


@settings(max_examples=300)
@given(st.binary(min_size=1, max_size=400))
def test_fuzz_rules_and_features_agree(data):
    rule = fet.exemption(data)
    assert rule in (None, "ex1", "ex2", "ex3", "ex4", "ex5")
    f = fet.features(data)
    if rule is None:
        assert 3.4 < f.popcount_per_byte < 4.6 and f.leading_printable < 6
        assert f.printable_fraction <= 0.5 and f.longest_printable_run <= 20
        assert f.protocol is None
