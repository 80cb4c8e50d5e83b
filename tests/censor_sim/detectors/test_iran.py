"""Iran's 2020 protocol filter fingerprints (Bock et al., FOCI 2020; docs/censors/iran.md §2)."""

from __future__ import annotations

import inspect
import random
import ssl
import struct

import dns.message
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.detectors import iran


def python_client_hello(host: str = "example.com") -> bytes:
    """A real TLS ClientHello from Python's ssl module (OpenSSL), via MemoryBIO."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    conn = ctx.wrap_bio(incoming, outgoing, server_hostname=host)
    with pytest.raises(ssl.SSLWantReadError):
        conn.do_handshake()
    return outgoing.read()


def dns_query(name: str = "example.com.", qid: int = 0x1234, rd: bool = True) -> bytes:
    q = dns.message.make_query(name, "A")
    q.id = qid
    if not rd:
        q.flags = 0
    return q.to_wire()


def test_constants():
    assert iran.PORTS == (53, 80, 443)
    assert iran.FILTER_S == 60
    # Not tied to the port: the classifier does not even take one.
    assert list(inspect.signature(iran.classify).parameters) == ["first_two_payloads"]


def test_random_payloads_are_not_allowed():
    rng = random.Random(2020)
    for _ in range(3000):
        payload = rng.randbytes(rng.randrange(0, 1500))
        assert iran.classify(payload) is None


@pytest.mark.parametrize("method", [b"GET ", b"POST ", b"HEAD ", b"CONNECT ", b"OPTIONS ",
                                    b"DELETE ", b"PUT "])
def test_http_methods(method):
    assert iran.classify((method + b"/xyzxyzxyz")[:max(8, len(method))]) == "http"


def test_http_fingerprint_edges():
    assert iran.classify(b"GET / + random filler \x00\xff\x13") == "http"
    assert iran.classify(b"GET aaaaa") == "http"  # the authors' example
    assert iran.classify(b"GET /ab") is None  # 7 bytes
    assert iran.classify(b"GET /abc") == "http"  # 8 bytes
    assert iran.classify(b"GET /") is None
    for nope in (b"TRACE / HTTP/1.1\r\n", b"PATCH / HTTP/1.1\r\n", b"get / HTTP/1.1\r\n",
                 b"GET\t/ HTTP/1.1\r\n", b" GET / HTTP/1.1\r\n"):
        assert iran.classify(nope) is None
    # No reassembly beyond the two packets: the authors' trigger sends G, ET, / apart.
    assert iran.classify(b"G" + b"ET") is None


def test_real_tls_client_hello():
    hello = python_client_hello()
    assert hello[0] == 0x16 and hello[1:3] == b"\x03\x01"
    assert iran.classify(hello) == "tls"
    # Split over the first two packets: still the same concatenation.
    assert iran.classify(hello[:100] + hello[100:]) == "tls"
    # Only the first segment of a hello that needed more (length field != bytes seen).
    assert iran.classify(hello[:100]) is None


def test_tls_fingerprint_edges():
    def rec(version: bytes, body: bytes, ctype: int = 0x16) -> bytes:
        return bytes([ctype]) + version + struct.pack("!H", len(body)) + body

    assert iran.classify(rec(b"\x03\x01", b"\xee" * 36)) == "tls"  # garbage hello, 41 bytes
    assert iran.classify(rec(b"\x03\x03", b"\x00" * 500)) == "tls"
    assert iran.classify(rec(b"\x03\x02", b"\x00" * 35)) is None  # 40 bytes
    assert iran.classify(rec(b"\x03\x00", b"\x00" * 100)) is None  # SSL 3.0
    assert iran.classify(rec(b"\x03\x04", b"\x00" * 100)) is None  # not a record version
    assert iran.classify(rec(b"\x03\x01", b"\x00" * 100, ctype=0x17)) is None  # assumption
    assert iran.classify(rec(b"\x03\x01", b"\x00" * 100) + b"x") is None  # length mismatch


def test_dns_bug_real_dns_over_tcp_is_not_dns():
    """§4.3's bug: the filter wants a DNS-over-UDP header even though it only runs on TCP.

    A real DNS-over-TCP query (RFC 7766 §8: two-byte length first) is read two bytes
    late: QR <- top bit of the ID, QDCOUNT <- flags (0x0100: RD), ANCOUNT <- QDCOUNT (1).
    It fails, as the authors say: "their whitelister will never match a legitimate
    DNS-over-TCP packet". It is harmless in practice only because such a query fits in
    the first packet, which the filter never drops.
    """
    wire = dns_query()
    over_tcp = struct.pack("!H", len(wire)) + wire
    assert iran.classify(over_tcp) is None
    assert iran.classify(struct.pack("!H", len(wire)) + dns_query(rd=False)) is None  # ANCOUNT
    # The very same message without the length prefix, i.e. UDP framing, passes.
    assert iran.classify(wire) == "dns"


def test_dns_fingerprint_edges():
    example = b"\x00\x00\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"  # the authors' example
    assert iran.classify(example) == "dns"
    assert iran.classify(example[:11]) is None  # < 12 bytes

    def hdr(flags=0x0100, qd=1, an=0, rest=b"") -> bytes:
        return struct.pack("!6H", 0xBEEF, flags, qd, an, 7, 9) + rest

    assert iran.classify(hdr(qd=14)) == "dns"
    assert iran.classify(hdr(qd=15)) is None
    assert iran.classify(hdr(qd=0)) == "dns"  # no question needed
    assert iran.classify(hdr(an=1)) is None
    assert iran.classify(hdr(flags=0x8180)) is None  # QR=1
    assert iran.classify(hdr(flags=0x7FFF, rest=b"anything at all")) == "dns"  # only QR read


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 0xFFFF), st.lists(st.sampled_from(["a", "bb", "example", "ir", "x-y"]),
                                        min_size=1, max_size=4), st.booleans())
def test_no_legitimate_dns_over_tcp_query_matches(qid, labels, rd):
    wire = dns_query(".".join(labels) + ".", qid, rd)
    assert not iran.is_dns(struct.pack("!H", len(wire)) + wire)
    assert iran.is_dns(wire)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_classify(data):
    got = iran.classify(data)
    assert got in (None, "http", "tls", "dns")
    assert (got is not None) == (iran.is_http(data) or iran.is_tls(data) or iran.is_dns(data))
