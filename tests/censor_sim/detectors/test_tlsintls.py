"""The TLS-in-TLS tests of Xue et al. 2024 (docs/censors/tlsintls.md), on hand-made flows."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.detectors import tlsintls as ti
from censor_sim.detectors.tlsintls import Pkt

HELLO = b"\x16\x03\x01\x02\x00\x01"
CCS = ti.CCS_RECORD


def cover_tls(inner: list[Pkt]) -> list[Pkt]:
    """An outer TLS 1.3 handshake (ClientHello; ServerHello..Finished with a CCS; the
    client's CCS and Finished), then ``inner`` shifted after it."""
    outer = [Pkt(1, 517, 0.00, HELLO), Pkt(-1, 1400, 0.01, b"\x16\x03\x03" + CCS),
             Pkt(-1, 900, 0.011), Pkt(1, 80, 0.02, CCS + b"\x17\x03\x03")]
    return outer + [Pkt(p.direction, p.size, p.time + 0.03, p.head) for p in inner]


def inner_handshake(overhead: int = 30, t0: float = 0.0) -> list[Pkt]:
    """A TLS 1.2 handshake as a tunnel carries it: 2 round trips, then data."""
    return [Pkt(1, 300 + overhead, t0), Pkt(-1, 1400 + overhead, t0 + 0.01),
            Pkt(-1, 1400 + overhead, t0 + 0.011), Pkt(-1, 1300 + overhead, t0 + 0.012),
            Pkt(1, 130 + overhead, t0 + 0.02), Pkt(-1, 60 + overhead, t0 + 0.03),
            Pkt(1, 400 + overhead, t0 + 0.04)] + [
        Pkt(-1, 1400 + overhead, t0 + 0.05 + 0.001 * i) for i in range(18)]


def model(**over) -> ti.Model:
    grams = ["2,-4,-4", "-4,1,-1", "1,-1,2"]  # what a tunnelled TLS 1.2 handshake makes
    base = dict(features=grams, p_tls=dict.fromkeys(grams, 0.06),
                p_other=dict.fromkeys(grams, 0.001), delta=0.5,
                mean=[310.0, -4100.0, 130.0, -60.0, 400.0],
                inv_cov=[[1 / 100.0**2 if i == j else 0.0 for j in range(5)] for i in range(5)],
                gamma=3.0, overhead=30)
    base.update(over)
    return ti.Model(**base)


def test_the_size_groups_and_their_bounds():
    assert [ti.group(s) for s in (1, 160, 161, 600, 601, 1210, 1211, 9000)] == \
        [1, 1, 2, 2, 3, 3, 4, 4]


def test_the_cover_handshake_ends_after_a_ccs_each_way():
    inner = inner_handshake()
    assert ti.strip_cover_handshake(cover_tls(inner))[0].size == inner[0].size
    assert len(ti.strip_cover_handshake(cover_tls(inner))) == len(inner)
    # No cover TLS (a fully encrypted tunnel): nothing is removed.
    assert ti.strip_cover_handshake(inner) == inner
    # A cover handshake with no CCS: its first three bursts (by direction) are dropped.
    no_ccs = [Pkt(1, 517, 0, HELLO), Pkt(-1, 1400, 0.01), Pkt(1, 80, 0.02),
              Pkt(-1, 200, 0.03)] + inner
    assert ti.strip_cover_handshake(no_ccs) == no_ccs[3:]


def test_bursts_join_same_direction_packets_under_three_rtts():
    pk = [Pkt(1, 100, 0.0), Pkt(1, 100, 0.029), Pkt(1, 100, 0.060), Pkt(-1, 50, 0.061)]
    assert ti.bursts(pk, rtt=0.01) == [200, 100, -50]  # 0.029 < 0.03 <= 0.031
    assert ti.bursts(pk, rtt=None) == [300, -50]
    assert ti.bursts(pk, rtt=0.01, overhead=30) == [140, 70, -20]


def test_ngrams_are_signed_groups_after_the_overhead():
    grams = ti.ngrams(inner_handshake()[:5], overhead=30)
    assert grams == Counter({"2,-4,-4": 1, "-4,-4,-4": 1, "-4,-4,1": 1})


def test_chi2_and_mahalanobis():
    assert ti.chi2_distance(Counter({"a": 1}), {"a": 1.0}, ["a"]) == 0.0
    assert ti.chi2_distance(Counter(), {"a": 0.5}, ["a"]) == pytest.approx(0.5)
    assert ti.mahalanobis([3, 4], [0, 0], [[1, 0], [0, 1]]) == 5.0
    assert ti.min_window_distance([-5, 3, 4, 1], [3, 4], [[1, 0], [0, 1]]) == 0.0
    assert ti.min_window_distance([-5], [3, 4], [[1, 0], [0, 1]]) is None


def test_a_tunnelled_handshake_is_flagged_and_bulk_is_not():
    m = model()
    flow = cover_tls(inner_handshake())
    d = ti.decide(m, flow, rtt=0.005)
    assert d.flagged and d.distance is not None and d.distance < 1.0
    bulk = cover_tls([Pkt(-1, 1448, 0.01 * i) for i in range(25)])
    assert not ti.decide(m, bulk, rtt=0.005).flagged
    # Both tests must hold: the bursts match but the 3-grams are made unlike TLS.
    assert not ti.decide(model(delta=0.0), flow, rtt=0.005).flagged
    assert not ti.decide(model(gamma=0.05), flow, rtt=0.005).flagged  # distance 0.1


def test_the_model_round_trips_and_bad_ones_are_refused():
    m = model()
    assert ti.Model.from_json(m.to_json()) == m
    with pytest.raises(ValueError, match="not a TLS-in-TLS model"):
        ti.Model.from_json({"format": "x"})
    bad = m.to_json()
    bad["bursts"]["inv_cov"] = [[1.0]]
    with pytest.raises(ValueError, match="disagree"):
        ti.Model.from_json(bad)
    bad = m.to_json()
    del bad["ngram"]["delta"]
    with pytest.raises(ValueError, match="bad TLS-in-TLS model"):
        ti.Model.from_json(bad)


packets = st.lists(st.builds(Pkt, st.sampled_from([1, -1]), st.integers(0, 70000),
                             st.floats(0, 100, allow_nan=False), st.binary(max_size=12)),
                   max_size=40)


@settings(max_examples=300, deadline=None)
@given(packets, st.one_of(st.none(), st.floats(0, 1, allow_nan=False)))
def test_decide_answers_for_any_flow(pk, rtt):
    d = ti.decide(model(), pk, rtt)
    assert isinstance(d.flagged, bool) and d.packets <= 25


def test_the_rtt_runs_from_the_syn_to_the_clients_handshake_ack():
    assert ti.handshake_rtt([(1, 0, 5.0), (-1, 0, 5.01), (1, 0, 5.02), (1, 517, 5.03)]) \
        == pytest.approx(0.02)
    assert ti.handshake_rtt([(1, 517, 0.0), (-1, 0, 0.01), (1, 0, 0.02)]) is None  # no SYN
    assert ti.handshake_rtt([(1, 0, 0.0), (1, 0, 0.01)]) is None  # the server never spoke
