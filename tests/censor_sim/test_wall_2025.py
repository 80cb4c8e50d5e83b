"""The GFW's and the Henan firewall's SNI and Host censorship, boundary by boundary, as
Wu, Zohaib, Durumeric, Houmansadr and Wustrow measured them ("A Wall Behind A Wall:
Emerging Regional Censorship in China", IEEE S&P 2025; profiles gfw-sni-rst-2025 and
henan-2025; docs/censors/blocking.md §5). Sections and tables are the paper's.
"""

from __future__ import annotations

import random

import pytest

from censor_sim import rstprints
from censor_sim.engine import Engine
from censor_sim.packet import ACK, PSH, SYN, Packet
from censor_sim.profile import load_profile
from tests.support.engine import CLIENT, SERVER, Clock, tcp
from tests.support.tlsrecords import client_hello, sni_span, split_records

BLOCKED = "www.blocked.lab"


def engine(name: str, overrides: dict | None = None) -> Engine:
    return Engine(load_profile(name, overrides), clock=Clock(), rng=random.Random(0))


def segment(payload: bytes, sport: int = 40000, dport: int = 443, dataofs: int = 5,
            seq: int = 1000, src: str = CLIENT, dst: str = SERVER) -> Packet:
    """A client data segment (20-byte TCP header unless ``dataofs`` says otherwise)."""
    return Packet(b"", 4, src, dst, 6, 64, 0, 20, sport, dport, seq, 5000, PSH | ACK,
                  dataofs, 8192, 0, payload)


def send(eng: Engine, segments: list[bytes], sport: int = 40000, dport: int = 443,
         handshake: str = "syn+synack", dataofs: int = 5) -> list:
    """The client's segments after the handshake packets named (``syn+synack``,
    ``syn``, or ``none``); the verdict of every data segment."""
    if handshake != "none":
        eng.handle(tcp(CLIENT, SERVER, sport, dport, SYN), True)
    if handshake == "syn+synack":
        eng.handle(tcp(SERVER, CLIENT, dport, sport, SYN | ACK), False)
        eng.handle(tcp(CLIENT, SERVER, sport, dport, ACK), True)
    out, seq = [], 1000
    for data in segments:
        out.append(eng.handle(segment(data, sport, dport, dataofs, seq), True))
        seq += len(data)
    return out


def reset(verdicts: list) -> bool:
    return any(v.inject for v in verdicts)


HELLO = client_hello(BLOCKED)
SNI_START, SNI_END = sni_span(HELLO)
BOTH = ("gfw-sni-rst-2025", "henan-2025")


# -- §4.3 "TLS fragmentation", Table III "TLS Reassembly: ✗ ✗" (issue 46, item 1) -------

@pytest.mark.parametrize("profile", BOTH)
def test_a_hello_whose_sni_is_split_across_two_records_in_one_segment_passes(profile):
    """§4.3: "neither the Henan Firewall nor the GFW perform TLS reassembly and thus,
    it is possible to bypass them via TLS ClientHello fragmentation", the SNI "split
    into multiple TLS segments within the same TCP payload". The same bytes as one
    record are blocked: the record boundary is all that differs."""
    assert reset(send(engine(profile), [HELLO]))
    cut = SNI_START - 5 + (SNI_END - SNI_START) // 2  # inside the server name
    assert not reset(send(engine(profile), [split_records(HELLO, cut)]))


@pytest.mark.parametrize("profile", BOTH)
def test_without_tls_reassembly_any_record_split_passes_and_the_other_reading_is_an_option(
        profile):
    """Which splits pass is not stated beyond the SNI split (docs/censors/blocking.md
    §5.2): by default a hello that goes on in a second record is not parsed at all,
    so a split after a whole SNI extension passes too; tls_records = "first-prefix"
    reads what the first record holds and blocks that one, not the SNI split."""
    after_sni = SNI_END - 5 + 1
    assert not reset(send(engine(profile), [split_records(HELLO, after_sni)]))
    prefix = engine(profile, {"detectors": {"tls": {"tls_records": "first-prefix"}}})
    assert reset(send(prefix, [split_records(HELLO, after_sni)], sport=40001))
    inside = SNI_END - 5 - 1  # the SNI's last byte in the second record
    assert not reset(send(prefix, [split_records(HELLO, inside)], sport=40002))


# -- §4.3 "TCP segmentation", Table III "TCP Reassembly: ✓ ✗" and §6 --------------------

def test_the_gfw_reassembles_tcp_segments_and_blocks_at_the_segment_that_completes_it():
    """§4.3: "we confirm that the GFW performs TCP reassembly"."""
    cut = SNI_START + 3  # the SNI extension begins in the first segment
    first, second = send(engine("gfw-sni-rst-2025"), [HELLO[:cut], HELLO[cut:]])
    assert not first.inject and second.inject


def test_henan_reads_each_segment_alone_and_blocks_when_the_first_holds_the_whole_sni():
    """§4.3: with "the second segment containing the forbidden domain name", Henan
    passes the hello; §6: "As long as the TCP packets carrying the beginning part of
    ClientHello messages does not contain a complete SNI extension, one can bypass
    the Henan Firewall." The boundary is the SNI extension's last byte."""
    eng = engine("henan-2025")
    whole, rest = HELLO[:SNI_END], HELLO[SNI_END:]
    assert reset(send(eng, [whole, rest], sport=40000))
    short, rest = HELLO[:SNI_END - 1], HELLO[SNI_END - 1:]
    assert not reset(send(eng, [short, rest], sport=40001))


# -- §4.3 "TCP handshake completeness requirements", Table III rows 1-2 -----------------

def test_the_gfw_needs_the_clients_syn_and_not_the_servers_syn_ack():
    assert not reset(send(engine("gfw-sni-rst-2025"), [HELLO], handshake="none"))
    assert reset(send(engine("gfw-sni-rst-2025"), [HELLO], handshake="syn"))
    assert reset(send(engine("gfw-sni-rst-2025"), [HELLO], handshake="syn+synack"))


def test_henan_needs_no_handshake_packet_at_all():
    assert reset(send(engine("henan-2025"), [HELLO], handshake="none"))


# -- §4.3 "TCP header length has to be 20 bytes", Table III last row --------------------

def test_henan_blocks_only_a_data_offset_of_five_of_all_sixteen_values():
    """"We changed the 4-bit TCP header length field ... to be all 2^4 possible
    values from 0 to 15 ... and found that the Henan Firewall only blocked a
    connection when its TCP header length value was 5 words"."""
    blocked = [d for d in range(16)
               if reset(send(engine("henan-2025"), [HELLO], handshake="none", dataofs=d))]
    assert blocked == [5]


def test_the_gfw_reads_any_tcp_header_length():
    assert reset(send(engine("gfw-sni-rst-2025"), [HELLO], dataofs=8))  # timestamps


# -- §4.1 the HTTP trigger, §5.1 one blocklist for Host and SNI (issue 46, item 2) -------

def http_request(host: str, end: bytes = b"\r\n", path: str = "/") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}".encode() + end


def test_henan_acts_on_the_papers_http_request_with_no_blank_line_after_it():
    """§4.1: the trigger request is ``GET / HTTP/1.1\\r\\nHost: example.com\\r\\n``; the
    Host line's end is the boundary, not the head's."""
    eng = engine("henan-2025")
    (v,) = send(eng, [http_request(BLOCKED)], sport=40000, dport=80, handshake="none")
    assert [(i.dst, i.payload) for i in v.inject] == [(CLIENT, rstprints.HENAN_PAYLOAD)]
    for port, end in enumerate((b"", b"\r"), start=40001):  # the Host line not ended yet
        assert not reset(send(eng, [http_request(BLOCKED, end)], sport=port, dport=80,
                              handshake="none"))


def test_a_lone_cr_ending_the_host_line_is_the_other_reading_and_an_option():
    """The paper's source carries an unpublished note that a Host line ended by a CR
    or an LF alone is enough: host_line_end = "cr-or-lf"."""
    eng = engine("henan-2025", {"detectors": {"http": {"host_line_end": "cr-or-lf"}}})
    for port, end in enumerate((b"\r", b"\n"), start=40000):
        assert reset(send(eng, [http_request(BLOCKED, end)], sport=port, dport=80,
                          handshake="none"))


def test_henan_matches_the_host_as_a_domain_of_its_sni_blocklist_and_not_the_path():
    eng = engine("henan-2025")

    def blocked(req: bytes, port: int) -> bool:
        return reset(send(eng, [req], sport=port, dport=80, handshake="none"))

    assert blocked(http_request("blocked.lab:8080"), 40000)  # port stripped
    assert blocked(http_request("WWW.Blocked.Lab"), 40001)   # names are case-free
    assert not blocked(http_request("notblocked.lab"), 40002)  # label-aligned
    assert not blocked(http_request("web.lab", path="/blocked.lab"), 40003)  # Host only


# -- Table IX (the rules' shapes) over Table VIII's permutations ----------------------

@pytest.mark.parametrize(("name", "domain_rule", "suffix_rule"), [
    ("blocked.lab", True, True),             # Test 1: domain
    ("ZZZZ.blocked.lab", True, True),        # Test 4: {str}.domain
    ("ZZZZblocked.lab", False, True),        # Test 5: {str}domain
    ("blocked.lab.ZZZZ", False, False),      # Test 2: domain.{str}
    ("blocked.labZZZZ", False, False),       # Test 3: domain{str}
    ("ZZZZblocked.labZZZZ", False, False),   # Test 0: {str}domain{str}
])
def test_the_two_henan_rule_shapes(name, domain_rule, suffix_rule):
    """Henan's rules are all end-anchored: ^(.*\\.)?keyword$ (64 %) and keyword$
    (36 %); a "*" pattern is the second."""
    hello = client_hello(name)
    for patterns, expect in ((["blocked.lab"], domain_rule), (["*blocked.lab"], suffix_rule)):
        eng = engine("henan-2025", {"detectors": {"tls": {"sni": patterns}}})
        assert reset(send(eng, [hello], handshake="none")) is expect, patterns


# -- §4.2 ------------------------------------------------------------------------------

def test_henan_samples_nothing_every_one_of_1000_hellos_is_reset():
    """"We sent 1,000 consecutive ClientHello messages ... each request made over a
    unique port pair ... We received the TCP RST packets for every connection"."""
    eng = engine("henan-2025")
    hits = sum(reset(send(eng, [HELLO], sport=20000 + i, dport=1 + i, handshake="none"))
               for i in range(1000))
    assert hits == 1000


def test_henan_ignores_traffic_into_the_province():
    """§4.2: "only traffic going out of Henan was blocked by the regional firewall"."""
    eng = engine("henan-2025")
    inbound = segment(HELLO, sport=40000, dport=443, src=SERVER, dst=CLIENT)
    assert not eng.handle(inbound, False).inject
