"""DNS query parsing (UDP/TCP), name matching and scapy-forged responses checked by dnspython."""

from __future__ import annotations

import struct

import dns.message
import dns.name
import dns.rdatatype
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.detectors import NeedMore
from censor_sim.detectors import dns as ddns


def query(name: str = "WwW.Example.COM.", rdtype: str = "A", **kw) -> dns.message.QueryMessage:
    q = dns.message.make_query(name, rdtype, **kw)
    q.id = 0x4A4B
    return q


def tcp(wire: bytes) -> bytes:
    return struct.pack("!H", len(wire)) + wire


def header(id_=1, flags=0x0100, qd=1, an=0, ns=0, ar=0) -> bytes:
    return struct.pack("!6H", id_, flags, qd, an, ns, ar)


def test_parse_dnspython_query():
    q = ddns.parse_query(query().to_wire())
    assert q is not None
    assert (q.id, q.qname, q.qtype, q.qclass, q.qdcount) == (0x4A4B, "www.example.com", 1, 1, 1)
    assert q.rd and q.opcode == 0 and q.flags == 0x0100
    assert q.labels == (b"WwW", b"Example", b"COM")
    q6 = ddns.parse_query(query("ipv6.example.", "AAAA", use_edns=0).to_wire())  # with OPT
    assert q6.qtype == 28 and q6.qname == "ipv6.example"
    root = ddns.parse_query(header() + b"\x00" + struct.pack("!HH", 2, 1))
    assert root.qname == "" and root.qtype == 2


def test_tcp_query_and_needmore():
    wire = query().to_wire()
    stream = tcp(wire)
    q = ddns.parse_tcp_query(stream + tcp(query("second.example.").to_wire()))  # pipelined
    assert q.qname == "www.example.com" and q.id == 0x4A4B
    for i in range(len(stream)):
        with pytest.raises(NeedMore):
            ddns.parse_tcp_query(stream[:i])
    assert ddns.parse_tcp_query(b"\x00\x05" + wire[:5]) is None  # shorter than a header
    resp = dns.message.make_response(query()).to_wire()
    assert ddns.parse_tcp_query(tcp(resp)[:5]) is None  # QR=1 seen early
    assert ddns.parse_tcp_query(tcp(header(qd=0) + b"\x00")[:8]) is None  # no question
    assert ddns.parse_tcp_query(tcp(resp)) is None


@pytest.mark.parametrize("bad", [
    b"",
    header()[:11],
    header(flags=0x8100) + b"\x00\x00\x01\x00\x01",  # a response
    header(qd=0) + b"\x00\x00\x01\x00\x01",  # no question
    header() + b"\x03www\x00\x00\x01",  # qclass cut short
    header() + b"\x03ww",  # label runs off the end
    header() + b"\xc0\x0c\x00\x01\x00\x01",  # pointer to itself
    header() + b"\x01a\xc0\x0c\x00\x01\x00\x01",  # pointer back to the name's start: loop
    header() + b"\xc0\x20" + b"\x00" * 30,  # pointer forwards
    header() + b"\xc0",  # half a pointer
    header() + b"\x41" + b"a" * 65 + b"\x00\x00\x01\x00\x01",  # 0b01 label type
    header() + b"\x81" + b"a" * 2 + b"\x00\x00\x01\x00\x01",  # 0b10 label type
    header() + (b"\x3f" + b"a" * 63) * 4 + b"\x00\x00\x01\x00\x01",  # 257-byte name
])
def test_malformed_queries_are_none(bad):
    assert ddns.parse_query(bad) is None
    assert ddns.parse_tcp_query(tcp(bad)) is None
    assert ddns.forge_response(bad, ["192.0.2.1"]) is None


def test_pointer_chain_into_the_header_terminates():
    # Name = pointer to offset 4, where the header's QDCOUNT bytes read as a label run
    # (00 01 -> root label): a legal-looking chain that must simply end.
    q = ddns.parse_query(header(id_=0, flags=0, qd=1) + b"\xc0\x04\x00\x01\x00\x01")
    assert q is not None and q.qname == ""


def test_longest_legal_name_and_escapes():
    name = (b"\x3f" + b"a" * 63) * 3 + b"\x3d" + b"b" * 61  # 255 bytes with the root
    assert ddns.parse_query(header() + name + b"\x00\x00\x01\x00\x01").qname.endswith("b" * 61)
    odd = ddns.parse_query(header() + b"\x03A.b\x02\x00\\\x00\x00\x01\x00\x01")
    assert odd.qname == "a\\.b.\\000\\\\"
    assert ddns.forge_response(header() + b"\x03a.b\x00\x00\x01\x00\x01", ["192.0.2.1"]) is None


def test_qname_matches():
    pats = ["example.com", "Blocked.ORG.", ""]
    assert ddns.qname_matches("www.example.com", pats) == "example.com"
    assert ddns.qname_matches("example.com.", pats) == "example.com"
    assert ddns.qname_matches("badexample.com", pats) is None  # label boundary
    assert ddns.qname_matches("a.b.blocked.org", pats) == "Blocked.ORG."
    assert ddns.qname_matches("www.example.com", pats, mode="exact") is None
    assert ddns.qname_matches("EXAMPLE.com", pats, mode="exact") == "example.com"
    assert ddns.qname_matches("badexample.com", pats, mode="substring") == "example.com"
    assert ddns.qname_matches("anything", [""]) is None
    assert ddns.qname_matches("x.example.com", ["nope", "example.com", "com"]) == "example.com"
    with pytest.raises(ValueError):
        ddns.qname_matches("x", ["x"], mode="regex")


def test_forged_response_parses_in_dnspython():
    q = query()
    wire = ddns.forge_response(q.to_wire(), ["192.0.2.7", "2001:db8::7", "198.51.100.1"], ttl=60)
    r = dns.message.from_wire(wire)
    assert r.id == 0x4A4B
    assert r.flags & dns.flags.QR and r.flags & dns.flags.AA and r.flags & dns.flags.RD
    assert r.rcode() == 0
    assert q.is_response(r)  # dnspython's own check: id, QR, opcode, question
    end = ddns.parse_query(q.to_wire()).question_end
    assert wire[12:end] == q.to_wire()[12:end]  # question echoed byte for byte (case kept)
    got = {(rr.rdtype, rd.address, rr.ttl) for rr in r.answer for rd in rr}
    assert got == {(dns.rdatatype.A, "192.0.2.7", 60), (dns.rdatatype.A, "198.51.100.1", 60),
                   (dns.rdatatype.AAAA, "2001:db8::7", 60)}
    assert all(rr.name == dns.name.from_text("www.example.com.") for rr in r.answer)


def test_forge_edge_cases():
    plain = header(flags=0) + b"\x01a\x00\x00\x01\x00\x01"
    r = dns.message.from_wire(ddns.forge_response(plain, [], ttl=0))
    assert r.answer == [] and not r.flags & dns.flags.RD
    assert ddns.forge_response(query(use_edns=0).to_wire(), ["192.0.2.1"]) is not None
    assert ddns.forge_response(dns.message.make_response(query()).to_wire(), ["192.0.2.1"]) is None
    with pytest.raises(ValueError):
        ddns.forge_response(plain, ["not-an-ip"])
    with pytest.raises(ValueError):
        ddns.forge_response(plain, ["192.0.2.1"], ttl=-1)


# --------------------------------------------------------------------------- property

_label = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_",
                 min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(_label, min_size=1, max_size=6), st.sampled_from(["A", "AAAA", "TXT", "MX"]),
       st.integers(0, 0xFFFF), st.booleans())
def test_roundtrip_against_dnspython(labels, rdtype, qid, edns):
    name = dns.name.from_text(".".join(labels) + ".")
    msg = dns.message.make_query(name, rdtype, use_edns=0 if edns else None)
    msg.id = qid
    wire = msg.to_wire()
    q = ddns.parse_query(wire)
    assert q.qname == name.to_text(omit_final_dot=True).lower()
    assert (q.id, q.qtype) == (qid, dns.rdatatype.from_text(rdtype))
    assert ddns.parse_tcp_query(tcp(wire)) == q
    r = dns.message.from_wire(ddns.forge_response(wire, ["192.0.2.9"]))
    assert msg.is_response(r)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120), st.booleans())
def test_fuzz_never_raises(data, with_header):
    payload = (header() + data) if with_header else data
    q = ddns.parse_query(payload)
    if q is not None:
        assert q.question_end <= len(payload)
        ddns.qname_matches(q.qname, ["example.com"])
    try:
        ddns.parse_tcp_query(payload)
    except NeedMore:
        pass
    ddns.forge_response(payload, ["192.0.2.1"])
