"""gfw-quic-sni-2024 through the engine, on an injectable clock: every measured boundary
(USENIX Security 2025: 60 s flow window, 180 s block on the 3-tuple, dates, ports)."""

from __future__ import annotations

import random

import pytest

from censor_sim.engine import Engine
from censor_sim.profile import load_profile
from tests.support.engine import CLIENT, SERVER, Clock, udp
from tests.support.quic_vectors import build_initial

BLOCKED = build_initial("blocked.lab")


def engine(as_of: str = "2025-06-01") -> Engine:
    prof = load_profile("gfw-quic-sni-2024", {"detectors": {"quic_sni": {"as_of": as_of}}})
    return Engine(prof, clock=Clock(), rng=random.Random(0))


def send(eng: Engine, payload: bytes, sport: int = 50000, dport: int = 443):
    return eng.handle(udp(CLIENT, SERVER, sport, dport, payload), True)


def test_one_initial_blocks_the_client_to_the_server_port_for_180s_from_any_source_port():
    eng = engine()
    assert not send(eng, BLOCKED).drop  # the trigger itself goes through (on-path)
    assert eng.effects.residuals == [((CLIENT, SERVER, 17, 443), 180.0)]
    eng.clock.t += 1
    assert send(eng, b"later", sport=50000).drop
    assert send(eng, b"new flow", sport=50001).drop  # any source port: the 3-tuple
    assert not send(eng, b"x" * 1200, sport=50002, dport=8443).drop  # another port
    # The server's datagrams are not dropped (client-to-server only).
    assert not eng.handle(udp(SERVER, CLIENT, 443, 50000, b"reply"), False).drop
    eng.clock.t += 178.9  # 179.9 s after the trigger
    assert send(eng, b"still", sport=50003).drop
    eng.clock.t += 0.1  # 180 s: lifted
    assert not send(eng, b"free", sport=50004).drop


def test_any_datagram_on_the_4_tuple_in_the_previous_60s_exempts_the_initial():
    eng = engine()
    assert not send(eng, b"\x00" * 40).drop  # something else first
    eng.clock.t += 59.9
    assert not send(eng, BLOCKED).drop and not eng.effects.residuals
    # The Initial refreshed the flow: 60 s must pass after the *last* datagram.
    eng.clock.t += 60.1
    assert not send(eng, BLOCKED).drop
    assert eng.effects.residuals  # a new flow: its first datagram was inspected


def test_only_the_first_datagram_of_a_flow_is_inspected():
    eng = engine()
    send(eng, b"\x00" * 40, sport=50010)
    for _ in range(3):
        assert not send(eng, BLOCKED, sport=50010).drop
    assert not eng.effects.residuals


@pytest.mark.parametrize(("sport", "dport", "blocked"), [
    (443, 443, False), (442, 443, False), (444, 443, True), (4000, 5000, False)])
def test_source_port_boundary(sport, dport, blocked):
    eng = engine()
    send(eng, BLOCKED, sport=sport, dport=dport)
    assert bool(eng.effects.residuals) is blocked


@pytest.mark.parametrize(("as_of", "outbound", "inbound"), [
    ("2024-04-06", False, False),  # before blocking began
    ("2024-04-07", True, True),
    ("2025-03-12", True, True),
    ("2025-03-13", True, False),  # §9: only traffic leaving China triggers it
])
def test_the_dates_of_the_model(as_of, outbound, inbound):
    eng = engine(as_of)
    send(eng, BLOCKED)
    assert bool(eng.effects.residuals) is outbound
    eng2 = engine(as_of)
    # An outside client (its port 50000 above our server's 443) sends the Initial in.
    eng2.handle(udp(SERVER, CLIENT, 50000, 443, BLOCKED), False)
    assert bool(eng2.effects.residuals) is inbound
    if inbound:  # the outside sender's triple is the one blocked
        assert eng2.effects.residuals == [((SERVER, CLIENT, 17, 443), 180.0)]
        eng2.clock.t += 1
        assert eng2.handle(udp(SERVER, CLIENT, 50001, 443, b"later"), False).drop
        assert not send(eng2, b"ours").drop


def test_a_bad_date_is_one_clear_error():
    with pytest.raises(ValueError, match=r"detectors\.quic_sni\.as_of: a date as YYYY-MM-DD"):
        engine("last year")


@pytest.mark.parametrize("variant", ["v2", "truncated", "alpn-only", "zero-cids"])
def test_evasions_pass_and_zero_length_ids_do_not(variant):
    eng = engine()
    send(eng, build_initial("blocked.lab", variant))
    assert bool(eng.effects.residuals) is (variant == "zero-cids")


# The artifact's own trigger (README, "Experiment 1", netcat): "a truncated QUIC packet
# with the SNI set to google.com", 95 bytes, sent from port 60001 to port 444; "If no
# subsequent packets are received on the server, it indicates successful triggering".
ARTIFACT_TRIGGER = bytes.fromhex(
    "c1000000010000004055f5de2bedfa3f92b1b6c9566bb0fdd4cd655379bc549f9383046e110d3ec5af79f9"
    "77950f7357c9af27587d2ca63da6f931afd48e211cbbb364d99a3363d60e23bbf8064b36e7294572c4a21"
    "0e895c752cadc168441")


def test_the_artifacts_own_short_initial_blocks_from_60001_to_444():
    """Zero-length connection IDs and no padding to 1,200 bytes: blocked all the same
    (Table 3, row 4, "both connection IDs of length 0"), on any port pair whose source
    port is the higher (Experiment 2: 4000 to 5000 not blocked, 65000 to 443 blocked)."""
    prof = load_profile("gfw-quic-sni-2024", {"detectors": {"quic_sni": {"sni": ["google.com"]}}})
    eng = Engine(prof, clock=Clock(), rng=random.Random(0))
    assert len(ARTIFACT_TRIGGER) == 95
    send(eng, ARTIFACT_TRIGGER, sport=60001, dport=444)
    assert eng.effects.residuals == [((CLIENT, SERVER, 17, 444), 180.0)]
    eng.clock.t += 5  # "After a few seconds, attempt to send it again"
    assert send(eng, ARTIFACT_TRIGGER, sport=60001, dport=444).drop
    low = Engine(prof, clock=Clock(), rng=random.Random(0))
    send(low, ARTIFACT_TRIGGER, sport=4000, dport=5000)
    assert not low.effects.residuals
