"""Measured RST-injector fingerprints: the GFW's three types and Henan's (S&P 2025, Table IV)."""

from __future__ import annotations

import random

import pytest

from censor_sim import rstprints
from censor_sim.actions import InjectTcp
from censor_sim.engine import Engine
from censor_sim.injector import craft
from censor_sim.packet import ACK, PSH, SYN, Packet
from censor_sim.profile import load_profile
from tests.support.engine import CLIENT, SERVER, Clock, connect, tcp
from tests.support.tlsrecords import client_hello

TEMPLATE = InjectTcp(SERVER, CLIENT, 443, 40000, seq=7, ack=9)


def draws(name: str, n: int = 3000) -> list[InjectTcp]:
    rng = random.Random(1)
    shape = rstprints.presets({"fingerprints": [name]})[0]
    return [p for _ in range(n) for p in rstprints.forge(shape, TEMPLATE, rng)]


@pytest.mark.parametrize(("name", "count", "flags", "df", "ttl", "ip_id"), [
    ("gfw-i", 1, "R", False, (55, 118), (0, 0)),
    ("gfw-ii", 3, "RA", True, (39, 238), (0x00A3, 0xFE5F)),
    ("gfw-iii", 1, "RA", False, (248, 248), (0x9916, 0x9933)),
    ("henan", 1, "RA", False, (58, 58), (1, 1)),
])
def test_each_fingerprint_stays_inside_and_spans_its_measured_ranges(name, count, flags, df,
                                                                     ttl, ip_id):
    pkts = draws(name)
    assert {p.count for p in pkts} == {count} and {p.flags for p in pkts} == {flags}
    assert {p.df for p in pkts} == {df}
    ttls, ids = [p.ttl for p in pkts], [p.ip_id for p in pkts]
    assert (min(ttls), max(ttls)) == ttl  # both ends reached, nothing outside
    lo, hi = ip_id
    assert lo <= min(ids) and max(ids) <= hi
    if hi - lo < 1000:
        assert (min(ids), max(ids)) == ip_id
    else:  # GFW II's "random": 3,000 draws spread over the observed 0x00A3–0xFE5F
        assert max(ids) - min(ids) > 0.98 * (hi - lo)
    payloads = {p.payload for p in pkts}
    assert payloads == ({bytes.fromhex("01020304050607080900")} if name == "henan" else {b""})


def test_the_forged_bytes_carry_the_fingerprint():
    from scapy.layers.inet import IP, TCP

    henan = rstprints.forge(rstprints.presets({"fingerprints": "henan"})[0], TEMPLATE,
                            random.Random(0))[0]
    p = IP(craft(henan))
    assert (p.ttl, p.id, int(p.flags), str(p[TCP].flags)) == (58, 1, 0, "RA")
    assert bytes(p[TCP].payload) == b"\x01\x02\x03\x04\x05\x06\x07\x08\x09\x00"
    gfw2 = rstprints.forge(rstprints.presets({"fingerprints": "gfw-ii"})[0], TEMPLATE,
                           random.Random(0))[0]
    assert IP(craft(gfw2)).flags == "DF"


def test_explicit_keys_override_a_fingerprint_and_unknown_names_are_refused():
    shape = rstprints.presets({"fingerprints": ["gfw-iii"], "ttl": 200, "to": "client"})[0]
    assert (shape["ttl"], shape["to"], shape["ip_id"]) == (200, "client", [0x9916, 0x9933])
    with pytest.raises(ValueError, match="unknown 'gfw-iv'"):
        rstprints.presets({"fingerprints": ["gfw-iv"]})
    # ... when the profile loads, not at the first forgery.
    from censor_sim.engine import unsupported

    bad = load_profile("gfw-sni-rst-2025", {"actions": {"rst": {"fingerprints": ["gfw-iv"]}}})
    assert "unknown 'gfw-iv'" in (unsupported(bad) or "")
    # No fingerprint: the lab's old default (three RSTs both ways) is unchanged.
    assert rstprints.presets({}) == [{"count": 3, "flags": "R", "to": "both"}]


def gfw_engine(seed: int = 0) -> Engine:
    return Engine(load_profile("gfw-sni-rst-2025"), clock=Clock(), rng=random.Random(seed))


def test_gfw_sni_draws_all_three_injectors_to_both_sides_and_a_180s_residual():
    eng = gfw_engine()
    v = connect(eng, 40000, 443, client_hello("www.blocked.lab"))
    to_client = [i for i in v.inject if i.dst == CLIENT]
    to_server = [i for i in v.inject if i.dst == SERVER]
    # I: 1 RST; II: 3 RST+ACK (one record sent 3 times); III: 1 RST+ACK; each way.
    for side in (to_client, to_server):
        assert sorted((i.flags, i.count, i.df) for i in side) == [
            ("R", 1, False), ("RA", 1, False), ("RA", 3, True)]
    assert eng.effects.residuals == [((CLIENT, SERVER, 6, 443), 180.0)]
    # The residual holds on the triple (any client port) until 180 s, then lifts.
    eng.clock.t += 179.9
    assert eng.handle(tcp(CLIENT, SERVER, 40001, 443, SYN), True).drop
    eng.clock.t += 0.1
    assert not eng.handle(tcp(CLIENT, SERVER, 40002, 443, SYN), True).drop
    assert not connect(gfw_engine(), 40000, 443, client_hello("example.lab")).inject


def henan_engine() -> Engine:
    return Engine(load_profile("henan-2025"), clock=Clock(), rng=random.Random(0))


def data(payload: bytes, dataofs: int = 5, sport: int = 40000, dport: int = 443) -> Packet:
    return Packet(b"", 4, CLIENT, SERVER, 6, 64, 0, 20, sport, dport, 1000, 5000,
                  PSH | ACK, dataofs, 8192, 0, payload)


@pytest.mark.parametrize("port", [1, 443, 8443, 65535])
def test_henan_resets_the_client_alone_on_any_port_with_no_handshake(port):
    eng = henan_engine()
    v = eng.handle(data(client_hello("blocked.lab"), dport=port), True)  # no SYN seen
    assert [(i.dst, i.flags, i.ttl, i.ip_id, i.payload) for i in v.inject] == [
        (CLIENT, "RA", 58, 1, rstprints.HENAN_PAYLOAD)]
    assert not eng.effects.residuals  # no residual: the next connection passes
    assert not eng.handle(data(b"\x16\x03\x01", sport=40001, dport=port), True).drop


def test_henan_reads_http_host_too_and_only_option_free_tcp_headers():
    eng = henan_engine()
    req = b"GET / HTTP/1.1\r\nHost: www.blocked.lab\r\n\r\n"
    assert eng.handle(data(req, sport=40001, dport=80), True).inject
    # A 32-byte header (Linux's timestamps): the segment passes unread (§4.3).
    for sport in (40002, 40003):
        eng2 = henan_engine()
        assert not eng2.handle(data(client_hello("blocked.lab"), dataofs=8, sport=sport),
                               True).inject
        assert not eng2.handle(data(req, dataofs=8, sport=sport, dport=80), True).inject
