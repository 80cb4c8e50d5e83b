"""The learning censor's feature vector: named, ordered, computed from a FlowLog."""

from __future__ import annotations

import random

import pytest

from censor_sim.detectors.ml import features
from censor_sim.detectors.ml.flowlog import DOWN, UP, FlowLog


def tcp_flow(payloads: list[tuple[int, float, bytes]], window: int = 30) -> FlowLog:
    log = FlowLog(window)
    for d, ts in ((UP, 0.0), (DOWN, 0.001), (UP, 0.002)):  # the handshake
        log.add(d, ts, 0)
    for d, ts, data in payloads:
        log.add(d, ts, len(data), data)
    return log


def test_names_are_unique_and_match_the_vector():
    for window in (1, 5, 30):
        names = features.feature_names(window)
        assert len(names) == len(set(names))
        assert len(features.extract(FlowLog(window), window)) == len(names)
    with pytest.raises(ValueError):
        features.feature_names(0)


def test_per_packet_and_first_payload_features():
    noise = random.Random(1).randbytes(1000)
    log = tcp_flow([(UP, 0.010, noise), (DOWN, 0.030, b"A" * 200), (UP, 0.031, b"")])
    f = features.extract_named(log)
    assert f["window_packets"] == 6
    assert (f["dir_3"], f["len_3"], f["iat_3"]) == (1, 1000, pytest.approx(8.0))
    assert (f["dir_4"], f["len_4"], f["iat_4"]) == (-1, 200, pytest.approx(20.0))
    assert f["dir_6"] == 0 and f["len_6"] == 0  # past the flow's end
    assert f["first_up_len"] == 1000 and f["first_up_ks_p"] > 0.1
    assert f["first_down_len"] == 200 and f["first_down_entropy"] == 0.0
    assert f["up_pkts"] == 4 and f["down_pkts"] == 2 and f["all_pkts"] == 6
    assert f["up_zero_frac"] == 0.75
    assert f["all_top1"] in (200, 1000)
    assert f["down_ent_max"] == 0.0 and f["up_ent_max"] > 7.5


def test_tls_application_records_are_counted():
    rec = b"\x17\x03\x03\x00\x20" + bytes(32)
    f = features.extract_named(tcp_flow([(UP, 0.01, rec), (DOWN, 0.02, rec),
                                         (DOWN, 0.03, b"\x16\x03\x03xx")]))
    assert f["up_tls_app_frac"] == 1.0 and f["down_tls_app_frac"] == 0.5


def test_window_cuts_the_flow():
    log = tcp_flow([(UP, 0.01 * i, b"x" * i) for i in range(1, 40)], window=10)
    assert len(log) == 10
    f = features.extract_named(log, 10)
    assert f["window_packets"] == 10 and f["len_9"] == 7


def test_iat_histogram_bins_sum_to_one():
    f = features.extract_named(tcp_flow([(UP, 0.5, b"a"), (DOWN, 2.0, b"b")]))
    hist = [f[f"iat_hist_{i}"] for i in range(len(features.IAT_EDGES_MS) + 1)]
    assert sum(hist) == pytest.approx(1.0)
    assert f["iat_hist_10"] > 0  # the 1.5 s gap: the 1000 ms+ bin


def test_flowlog_rejects_bad_packets():
    log = FlowLog(3)
    with pytest.raises(ValueError):
        log.add(0, 0.0, 0)
    with pytest.raises(ValueError):
        log.add(UP, 0.0, 1, b"too long")
    with pytest.raises(ValueError):
        FlowLog(0)
