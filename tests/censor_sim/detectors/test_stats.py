"""Flow statistics: entropy, popcount, first-N packet features."""

import json

from censor_sim.detectors import stats


def test_entropy_bounds():
    assert stats.shannon_entropy(b"\x00" * 100) == 0.0
    assert stats.shannon_entropy(bytes(range(256))) == 8.0
    assert stats.shannon_entropy(b"") == 0.0


def test_popcount_and_printable():
    assert stats.popcount_mean(b"\xff\x00") == 4.0
    assert stats.printable_fraction(b"ab\x00\x01") == 0.5
    assert stats.block_entropy(bytes(range(16)), 8) == [3.0, 3.0]


def test_flowstats_caps_and_features():
    fs = stats.FlowStats(limit=3)
    for i, (d, n) in enumerate([(1, 0), (-1, 0), (1, 100), (-1, 50)]):
        fs.add(d, n, i * 0.5)
    fs.note_first_payload(1, b"\x00" * 10)
    fs.note_first_payload(1, b"ignored: not the first")
    assert fs.full and fs.lengths == [0, 0, 100] and fs.iats == [0.0, 0.5, 0.5]
    feats = json.loads(json.dumps(fs.features()))
    assert feats["first_payload"]["c2s"] == {"length": 10, "entropy": 0.0, "popcount": 0.0}
