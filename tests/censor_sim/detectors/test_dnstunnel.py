"""The model DNS-tunnel detector (docs/censors/dnstunnel.md §2)."""

from __future__ import annotations

import base64
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.all import DNS, DNSQR

from censor_sim.detectors import dnstunnel as dt
from censor_sim.inspectors import DONE, DnsTunnelInspector, Match
from tests.support.flows import udp_flow

NULL, TXT, A = 10, 16, 1


def labels(name: str) -> tuple[bytes, ...]:
    return tuple(x.encode() for x in name.split("."))


def query(name: str, qtype: int = A) -> bytes:
    return bytes(DNS(id=7, rd=1, qd=DNSQR(qname=name, qtype=qtype)))


def tunnel_name(rng: random.Random, chars: int = 60, domain: str = "t.example") -> str:
    """An iodine-like name: base32 of random bytes, in labels of at most 63."""
    enc = base64.b32encode(rng.randbytes(chars)).decode().rstrip("=").lower()[:chars]
    return ".".join(enc[i : i + 57] for i in range(0, len(enc), 57)) + "." + domain


def test_tunnel_names_are_suspicious_and_ordinary_ones_are_not():
    rng = random.Random(1)
    f = dt.features(labels(tunnel_name(rng)), NULL)
    assert f.domain == "t.example" and f.payload_length == 60 and f.entropy > 4.0
    assert dt.suspicious(f) == "encoded-labels"
    for name in ("www.google.com", "mail.example.org", "cdn-assets.static.example.net",
                 "a-long-but-ordinary-hostname.example.com"):
        assert dt.suspicious(dt.features(labels(name), A)) is None, name


def test_the_payload_and_entropy_bounds():
    rng = random.Random(2)
    at = dt.features(labels(tunnel_name(rng, 30)), A)
    below = dt.features(labels(tunnel_name(rng, 29)), A)
    assert at.payload_length == 30 and below.payload_length == 29
    assert dt.suspicious(at) == "encoded-labels" and dt.suspicious(below) is None
    # A TXT or NULL query needs half the payload.
    assert dt.suspicious(dt.features(labels(tunnel_name(rng, 15)), TXT)) == "encoded-labels"
    assert dt.suspicious(dt.features(labels(tunnel_name(rng, 14)), TXT)) is None
    # Thirty characters of low entropy are not encoded data.
    flat = dt.features(labels("abababababababababababababababab.t.example"), A)
    assert flat.entropy < dt.MIN_ENTROPY and dt.suspicious(flat) is None


def test_the_name_length_bound():
    name = ".".join(["www"] * 24) + ".example.com"  # 107 characters, low entropy
    f = dt.features(labels(name), A)
    assert f.name_length == len(name) > dt.MAX_NAME and dt.suspicious(f) == "long-name"
    assert dt.suspicious(f, max_name=len(name)) is None


def run(names: list[tuple[float, str, int]], params: dict | None = None):
    """Queries as (time, name, qtype) from one client, each on a fresh source port."""
    insp = DnsTunnelInspector("dt", params or {})
    out = []
    for i, (t, name, qtype) in enumerate(names):
        fed = udp_flow(53)
        fed.client_port = 30000 + i
        fed.table.clock = lambda t=t: t
        pkt = fed.add(True, query(name, qtype))
        out.append(insp.inspect(fed.flow, pkt, True))
    return out


def test_the_fifth_suspicious_query_in_ten_seconds_matches():
    rng = random.Random(3)
    res = run([(float(i), tunnel_name(rng), NULL) for i in range(6)])
    assert res[:4] == [None] * 4 and all(isinstance(r, Match) for r in res[4:])
    assert res[4].evidence["queries"] == 5 and res[4].evidence["qtype"] == "NULL"


def test_queries_spread_over_more_than_the_window_never_match():
    rng = random.Random(4)
    assert not any(isinstance(r, Match) for r in
                   run([(i * 2.6, tunnel_name(rng), NULL) for i in range(20)]))
    # At 2.5 s apart, five fit in 10 s.
    assert isinstance(run([(i * 2.5, tunnel_name(rng), NULL) for i in range(5)])[-1], Match)


def test_ordinary_lookups_and_other_domains_do_not_add_up():
    rng = random.Random(5)
    mixed = [(0.1 * i, tunnel_name(rng, domain=f"d{i}.example"), TXT) for i in range(10)]
    mixed += [(1.0 + 0.1 * i, f"host{i}.example.com", A) for i in range(10)]
    assert not any(isinstance(r, Match) for r in run(mixed))


def test_non_dns_payload_on_port_53_is_let_go():
    fed = udp_flow(53)
    pkt = fed.add(True, b"\x01\x00\x00\x00" + bytes(144))
    assert DnsTunnelInspector("dt", {}).inspect(fed.flow, pkt, True) == DONE


def test_the_pair_table_is_bounded():
    rng = random.Random(6)
    insp_params = {"max_keys": 10}
    names = [(0.0, tunnel_name(rng, domain=f"z{i}.example"), TXT) for i in range(50)]
    insp = DnsTunnelInspector("dt", insp_params)
    for i, (_, name, qtype) in enumerate(names):
        fed = udp_flow(53)
        fed.client_port = 20000 + i
        pkt = fed.add(True, query(name, qtype))
        insp.inspect(fed.flow, pkt, True)
    assert len(insp.recent) == 10


@pytest.mark.parametrize("bad", [b"", b"\x00", bytes(12), b"\xff" * 40])
def test_malformed_queries_are_not_dns(bad):
    fed = udp_flow(53)
    pkt = fed.add(True, bad)
    res = DnsTunnelInspector("dt", {}).inspect(fed.flow, pkt, True)
    assert res in (None, DONE)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=63), max_size=8), st.integers(0, 65535))
def test_features_answer_for_any_labels(raw_labels, qtype):
    f = dt.features(tuple(raw_labels), qtype)
    assert 0.0 <= f.entropy <= 8.0 and f.payload_length >= 0
    assert dt.suspicious(f) in (None, "long-name", "encoded-labels")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=10))
def test_the_inspector_never_raises(payloads):
    insp = DnsTunnelInspector("dt", {"min_queries": 2})
    fed = udp_flow(53)
    for p in payloads:
        pkt = fed.add(True, p)
        r = insp.inspect(fed.flow, pkt, True)
        assert r is None or r == DONE or isinstance(r, Match)
