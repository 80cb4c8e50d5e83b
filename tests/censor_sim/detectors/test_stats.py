"""Flow statistics (docs/censors/ml.md §1, Wang et al. CCS 2015): byte statistics and FlowStats."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest

from censor_sim.detectors import stats


def test_entropy_bounds():
    assert stats.shannon_entropy(b"") == 0.0
    for b in (0x00, 0x41, 0xFF):
        h = stats.shannon_entropy(bytes([b]) * 100)
        assert h == 0.0 and math.copysign(1.0, h) == 1.0    # constant: 0, never -0.0
    assert stats.shannon_entropy(bytes(range(256))) == 8.0  # all 256 values once
    assert stats.shannon_entropy(bytes(range(256)) * 3) == 8.0
    assert stats.shannon_entropy(b"ab") == 1.0
    assert stats.shannon_entropy(b"aabb" * 10) == 1.0
    assert stats.shannon_entropy(bytes(range(16))) == 4.0
    h = stats.shannon_entropy(random.Random(1).randbytes(4096))
    assert 7.9 < h < 8.0


def test_popcount_and_printable():
    assert stats.popcount_mean(b"") == 0.0 and stats.printable_fraction(b"") == 0.0
    assert stats.popcount_mean(b"\xff\x00") == 4.0
    assert stats.popcount_mean(b"\x0f" * 7 + b"\x07" * 3) == 3.7
    assert stats.popcount_mean(bytes(range(256))) == 4.0
    assert stats.printable_fraction(b"ab\x00\x01") == 0.5
    assert stats.printable_fraction(b" ~\x1f\x7f") == 0.5                # both edges
    assert stats.printable_fraction(bytes(range(256))) == 95 / 256


def test_block_entropy():
    assert stats.block_entropy(bytes(range(16)), 8) == [3.0, 3.0]
    assert stats.block_entropy(bytes(range(20)), 8) == [3.0, 3.0]       # partial block dropped
    assert stats.block_entropy(b"\x00" * 8 + b"abcdabcd", 8) == [0.0, 2.0]
    assert stats.block_entropy(b"short", 8) == []
    with pytest.raises(ValueError):
        stats.block_entropy(b"x", 0)


def test_expected_block_entropy_exact_small_cases():
    assert stats.expected_block_entropy(1) == 0.0
    # Two bytes: distinct (probability 255/256) gives 1 bit, equal gives 0.
    assert stats.expected_block_entropy(2) == pytest.approx(255 / 256)
    # Three binary symbols: 2 of 8 strings constant, 6 split 2+1 (entropy h(1/3)).
    h = -(1 / 3 * math.log2(1 / 3) + 2 / 3 * math.log2(2 / 3))
    assert stats.expected_block_entropy(3, alphabet=2) == pytest.approx(6 / 8 * h)
    with pytest.raises(ValueError):
        stats.expected_block_entropy(33)


def test_expected_block_entropy_matches_random_blocks():
    """The reference for a Wang-style block-8 test: random blocks average 2.9728 bits."""
    expected = stats.expected_block_entropy(8)
    assert expected == pytest.approx(2.972789, abs=1e-6)
    rng = random.Random(8)
    sample = stats.block_entropy(rng.randbytes(8 * 20000), 8)
    mean, sd = statistics.fmean(sample), statistics.pstdev(sample)
    assert abs(mean - expected) <= 4 * sd / math.sqrt(len(sample))
    # Plaintext sits well below the random reference.
    text = b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n"
    assert statistics.fmean(stats.block_entropy(text, 8)) < expected - 0.2


def test_flowstats_iats_and_cap():
    fs = stats.FlowStats(limit=3)
    assert fs.limit == 3 and not fs.full and fs.iats == [] and len(fs) == 0
    for d, n, t in [(1, 0, 10.0), (-1, 0, 10.25), (1, 100, 11.0), (-1, 50, 12.0)]:
        fs.add(d, n, t)
    assert fs.full and len(fs) == 3
    assert fs.lengths == [0, 0, 100] and fs.directions == [1, -1, 1]
    assert fs.times == [10.0, 10.25, 11.0] and fs.iats == [0.0, 0.25, 0.75]


def test_flowstats_default_is_wangs_first_30_packets():
    fs = stats.FlowStats()
    assert fs.limit == stats.DEFAULT_PACKETS == 30
    for i in range(45):
        fs.add(1 if i % 2 == 0 else -1, i, i * 0.01)
    assert fs.full and len(fs.lengths) == 30 and fs.lengths[-1] == 29
    assert len(fs.iats) == 30 and fs.iats[0] == 0.0


def test_flowstats_rejects_bad_input():
    fs = stats.FlowStats()
    for bad in (0, 2, -2):
        with pytest.raises(ValueError):
            fs.add(bad, 10, 0.0)
        with pytest.raises(ValueError):
            fs.note_first_payload(bad, b"x")
    with pytest.raises(ValueError):
        fs.add(1, -1, 0.0)
    with pytest.raises(ValueError):
        stats.FlowStats(0)


def test_first_payload_per_direction():
    fs = stats.FlowStats()
    fs.note_first_payload(1, b"")                       # empty: not a first payload
    fs.note_first_payload(1, b"\x00" * 10)
    fs.note_first_payload(1, b"ignored: not the first")
    fs.note_first_payload(-1, bytes(range(256)))
    c2s, s2c = fs.first_payload[1], fs.first_payload[-1]
    assert (c2s.length, c2s.entropy, c2s.popcount, c2s.printable_fraction) == (10, 0.0, 0.0, 0.0)
    assert (s2c.length, s2c.entropy, s2c.popcount) == (256, 8.0, 4.0)


def test_features_are_json_safe():
    fs = stats.FlowStats(limit=4)
    for d, n, t in [(1, 0, 0.0), (-1, 0, 0.001), (1, 517, 0.002), (-1, 1400, 0.05), (1, 9, 1.0)]:
        fs.add(d, n, t)
    fs.note_first_payload(1, random.Random(3).randbytes(517))
    feats = fs.features()
    assert json.loads(json.dumps(feats, allow_nan=False)) == feats
    assert feats["packets"] == 4 and feats["full"] is True
    assert feats["lengths"] == [0, 0, 517, 1400] and feats["directions"] == [1, -1, 1, -1]
    assert feats["iats"] == pytest.approx([0.0, 0.001, 0.001, 0.048])
    assert (feats["c2s_packets"], feats["s2c_packets"]) == (2, 2)
    assert (feats["c2s_bytes"], feats["s2c_bytes"]) == (517, 1400)
    assert set(feats["first_payload"]) == {"c2s"}
    assert feats["first_payload"]["c2s"]["length"] == 517
    assert 7.0 < feats["first_payload"]["c2s"]["entropy"] <= 8.0
    empty = stats.FlowStats().features()
    assert json.loads(json.dumps(empty)) == empty and empty["packets"] == 0
