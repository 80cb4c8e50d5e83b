"""Geneva's twelve lab censors, packet by packet (docs/censors/geneva.md §2).

Packets are built with scapy and parsed by :mod:`censor_sim.packet`, so the
censors see real bytes, checksums included. Each censor must censor the plain
keyword exchange, and each shows the synchronisation quirk its Geneva file has.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP, UDP

from censor_sim import packet
from censor_sim.detectors import geneva
from censor_sim.engine import Effects, Engine
from censor_sim.profile import load_profile

C, S, CENSOR = "198.18.0.2", "198.18.5.2", "198.18.0.1"
WORD = b"ultrasurf"
DROPPERS = ("censor1", "censor4", "censor6", "censor7", "censor8", "censor9")
RST_TARGETS = {"censor2": {C}, "censor3": {C, S}, "censor5": {S}, "censor8b": {C, S},
               "censor10": {C, S}, "censor11": {C, S}}


def seg(src: str, dst: str, sport: int, dport: int, flags: str, seq: int, ack: int = 0,
        payload: bytes = b"", **tcp: object) -> packet.Packet:
    """A real IPv4/TCP packet, built by scapy and parsed as the censor parses it."""
    ttl = tcp.pop("ttl", 64)
    raw = bytes(IP(src=src, dst=dst, ttl=ttl) / TCP(sport=sport, dport=dport, flags=flags,
                                                     seq=seq, ack=ack, **tcp) / payload)
    p = packet.parse(raw)
    assert p is not None
    return p


class Conn:
    """One client→server connection whose packets a test feeds to a censor."""

    def __init__(self, cport: int = 40000, port: int = 7300, isn: int = 1000,
                 server_isn: int = 90000) -> None:
        self.cport, self.port = cport, port
        self.cseq, self.sseq = isn, server_isn

    def c(self, flags: str, payload: bytes = b"", seq: int | None = None, **kw) -> packet.Packet:
        p = seg(C, S, self.cport, self.port, flags, self.cseq if seq is None else seq,
                self.sseq if "A" in flags else 0, payload, **kw)
        if seq is None:
            self.cseq += len(payload) + (1 if "S" in flags or "F" in flags else 0)
        return p

    def s(self, flags: str, payload: bytes = b"", **kw) -> packet.Packet:
        p = seg(S, C, self.port, self.cport, flags, self.sseq, self.cseq, payload, **kw)
        self.sseq += len(payload) + (1 if "S" in flags or "F" in flags else 0)
        return p

    def handshake(self) -> list[packet.Packet]:
        return [self.c("S"), self.s("SA"), self.c("A")]


def feed(censor: geneva.GenevaCensor, pkts: list[packet.Packet]) -> list:
    return [censor.process(p) for p in pkts]


def fires(censor: geneva.GenevaCensor, pkt: packet.Packet) -> bool:
    before = len(censor.detections)
    censor.process(pkt)
    return len(censor.detections) > before


def plain_exchange(name: str, **kw) -> tuple[geneva.GenevaCensor, Conn, geneva.Verdict]:
    """Geneva's echo plugin: handshake, then the forbidden word; the word's verdict."""
    censor, conn = geneva.make(name, **kw), Conn()
    assert not any(v.drop or v.inject for v in feed(censor, conn.handshake()))
    assert not censor.detections
    return censor, conn, censor.process(conn.c("PA", WORD))


# -- every censor censors the plain exchange ------------------------------------------------

@pytest.mark.parametrize("name", sorted(geneva.CENSORS))
def test_every_censor_censors_the_plain_keyword_exchange(name):
    censor, conn, v = plain_exchange(name, censor_ip=CENSOR)
    [d] = censor.detections
    assert d["censor"] == name and d["reason"] == "keyword" and d["keyword"] == "ultrasurf"
    assert d["packet"]["src"] == C and d["packet"]["flags"] == "PA"
    if name in DROPPERS:
        assert v.drop and not v.inject and d["action"] == "drop"
    else:
        assert not v.drop and d["action"] == "rst"
        assert {i.dst for i in v.inject} == RST_TARGETS[name]
        for rst in v.inject:
            # Scapy's defaults, which [TCP:window:8192]-drop keys on; five copies each.
            assert (rst.flags, rst.window, rst.ttl, rst.count) == ("R", 8192, 64, 5)
            if rst.dst == C:  # spoofed from the server, at the client's expected seq
                assert (rst.src, rst.sport, rst.dport, rst.seq) == (S, 7300, 40000, conn.sseq)
                assert rst.ack == conn.cseq - len(WORD) + len(str(WORD))  # scapy 2.4.3's str()
            else:  # from the censor's own address, at the server's expected seq
                assert (rst.src, rst.seq) == (CENSOR, conn.cseq - len(WORD))


@pytest.mark.parametrize("name", sorted(geneva.CENSORS))
def test_benign_traffic_passes_every_censor(name):
    censor, conn = geneva.make(name), Conn()
    pkts = conn.handshake() + [conn.c("PA", b"hello"), conn.s("PA", b"hello"), conn.c("A"),
                               conn.c("FA"), conn.s("FA"), conn.c("A")]
    assert not any(v.drop or v.inject for v in feed(censor, pkts))
    assert not censor.detections


def test_the_keyword_is_a_substring_of_one_packet_and_any_keyword_works():
    censor, conn = geneva.make("censor1", keyword="facebook"), Conn()
    feed(censor, conn.handshake())
    assert not fires(censor, conn.c("PA", b"GET /ultrasurf"))
    assert fires(censor, conn.c("PA", b"GET /facebook.com HTTP/1.1"))


def test_only_the_watched_port_and_ipv4_tcp_are_queued():
    censor = geneva.make("censor6", port=7300)
    assert not fires(censor, seg(C, S, 40000, 7400, "PA", 1, payload=WORD))
    udp = packet.parse(bytes(IP(src=C, dst=S) / UDP(sport=40000, dport=7300) / WORD))
    assert udp is not None and not censor.process(udp).drop
    assert fires(censor, seg(C, S, 40000, 7300, "PA", 1, payload=WORD))


def test_make_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown Geneva censor 'censor12'"):
        geneva.make("censor12")


# -- censor1 to censor5: one sequence number, synchronised on every pure SYN --------------

def test_censor1_drops_everything_from_the_client_for_good_but_not_the_server():
    censor, _, _ = plain_exchange("censor1")
    again = Conn(cport=40001)
    assert censor.process(again.c("S")).drop  # a new connection, no keyword: still dropped
    assert not censor.process(again.s("SA")).drop
    assert censor.detections[-1]["reason"] == "flagged-ip"


@pytest.mark.parametrize("name", ["censor1", "censor2", "censor3", "censor5"])
def test_a_syn_with_a_bogus_seq_desynchronises_the_single_tcb(name):
    """docs/censors/geneva.md §2.2: censor1-5 resynchronise on *every* pure SYN, whoever
    sends it."""
    censor, conn = geneva.make(name), Conn()
    feed(censor, conn.handshake())
    censor.process(conn.c("S", seq=conn.cseq + 5000))  # insertion: the server ignores it
    v = censor.process(conn.c("PA", WORD))
    assert not v.drop and not v.inject and not censor.detections
    assert censor.state()["tcb"] == conn.cseq - len(WORD) + 5000 + 1


def test_censor1_reads_only_the_in_sequence_packet():
    censor, conn = geneva.make("censor1"), Conn()
    feed(censor, conn.handshake())
    assert not fires(censor, conn.c("PA", WORD, seq=conn.cseq + 100))  # out of order: unread
    assert not fires(censor, conn.s("PA", WORD))  # the server's side never matches
    assert fires(censor, conn.c("PA", WORD))


def test_censor2_only_resets_the_client_and_keeps_no_flagged_ip():
    censor, conn, v = plain_exchange("censor2")
    assert [i.dst for i in v.inject] == [C]
    # A client that drops the RSTs ([TCP:dataofs:5]-drop) carries on: the server's echo
    # is never matched and nothing it sends later is dropped.
    assert not censor.process(conn.s("PA", WORD)).inject
    assert not censor.process(conn.c("PA", b"more")).drop


def test_censor3_resets_both_sides_from_the_client_address_without_nat():
    _, conn, v = plain_exchange("censor3")
    to_server = next(i for i in v.inject if i.dst == S)
    assert (to_server.src, to_server.sport, to_server.dport) == (C, 40000, 7300)


def test_censor4_resynchronises_on_any_pure_ack():
    """A pure ACK with a wrong seq (which the server discards) moves censor4's TCB;
    censor1 ignores the same packet."""
    for name, censored in (("censor4", False), ("censor1", True)):
        censor, conn = geneva.make(name), Conn()
        feed(censor, conn.handshake())
        censor.process(conn.c("A", seq=conn.cseq + 7777))
        assert bool(censor.process(conn.c("PA", WORD)).drop) is censored, name


def test_censor5_resets_only_the_server():
    _, _, v = plain_exchange("censor5", censor_ip=CENSOR)
    assert [(i.src, i.dst) for i in v.inject] == [(CENSOR, S)]


# -- censor6 to censor9: teardown and resynchronisation -----------------------------------

def test_censor6_any_r_ra_or_f_from_anyone_blinds_it_forever():
    censor, conn = geneva.make("censor6"), Conn()
    feed(censor, conn.handshake())
    other = Conn(cport=41000, port=9999)
    censor.process(other.c("R"))  # some unrelated connection's RST
    assert not fires(censor, conn.c("PA", WORD))
    fresh = Conn(cport=40002)
    feed(censor, fresh.handshake())
    assert not fires(censor, fresh.c("PA", WORD)) and censor.state()["live"] is False


def test_censor6_searches_every_packet_until_then_and_fa_is_not_a_teardown():
    censor, conn = geneva.make("censor6"), Conn()
    censor.process(conn.c("FA"))  # Linux's FIN carries ACK: not in ["R", "RA", "F"]
    assert fires(censor, conn.s("PA", WORD))  # no handshake seen, server side: still read


def test_censor7_tears_down_only_on_the_learned_tuple():
    censor, conn = geneva.make("censor7"), Conn()
    feed(censor, conn.handshake())
    censor.process(Conn(cport=41000).c("R"))  # another client port: not a teardown
    assert censor.state()["torn_down"] is False
    assert fires(censor, Conn(cport=42000).c("PA", WORD))  # every flow is searched
    censor2, conn2 = geneva.make("censor7"), Conn()
    feed(censor2, conn2.handshake())
    censor2.process(conn2.c("R", seq=1))  # right tuple, any seq
    assert not fires(censor2, conn2.c("PA", WORD))


def test_censor8_teardown_needs_the_right_sequence_number():
    censor, conn = geneva.make("censor8"), Conn()
    feed(censor, conn.handshake())
    censor.process(conn.c("R", seq=conn.cseq + 1000))  # wrong seq: ignored
    censor.process(conn.c("RA"))  # right seq, but "RA" is not in censor8's list
    assert fires(censor, conn.c("PA", WORD))
    censor, conn = geneva.make("censor8"), Conn()
    feed(censor, conn.handshake())
    censor.process(conn.c("R", seq=conn.cseq))  # e.g. TTL-limited: the server never sees it
    assert not fires(censor, conn.c("PA", WORD)) and censor.state()["torn_down"]


def test_censor9_resynchronises_on_the_packet_after_a_matching_rst():
    censor, conn = geneva.make("censor9"), Conn()
    feed(censor, conn.handshake())
    censor.process(conn.c("R", seq=conn.cseq))  # matching RST: resync state
    assert censor.state()["resynchronize"]
    censor.process(conn.c("PA", b"x" * 10, seq=conn.cseq + 50000))  # becomes the TCB
    assert not fires(censor, conn.c("PA", WORD))  # the real stream no longer matches


def test_censor9_tracks_only_the_first_connection():
    """Linux closes with "FA", which censor9 does not treat as a teardown."""
    censor, first = geneva.make("censor9"), Conn()
    feed(censor, first.handshake() + [first.c("FA"), first.s("FA"), first.c("A")])
    second = Conn(cport=40001)
    feed(censor, second.handshake())
    assert not fires(censor, second.c("PA", WORD))
    assert censor.state()["tcb"][2] == 40000


# -- censor8b, censor10, censor11: a TCB per connection ----------------------------------

def test_censor8b_a_bad_checksum_rst_with_the_right_seq_removes_the_tcb():
    censor, conn = geneva.make("censor8b"), Conn()
    feed(censor, conn.handshake())
    censor.process(conn.c("R", seq=conn.cseq, chksum=0xBEEF))  # the server would discard it
    assert censor.state()["tcbs"] == []
    assert not fires(censor, conn.c("PA", WORD))


def test_censor8b_ignores_a_data_offset_below_5():
    censor, conn = geneva.make("censor8b"), Conn()
    feed(censor, conn.handshake())
    p = conn.c("PA", b"\0" * 20 + WORD, seq=conn.cseq, dataofs=0)
    assert p.payload.endswith(WORD) and not fires(censor, p)
    assert fires(censor, conn.c("PA", WORD))


def test_censor8b_tracks_many_connections_and_keeps_resetting_flagged_ips():
    censor, a, b = geneva.make("censor8b"), Conn(cport=40000), Conn(cport=40001)
    feed(censor, a.handshake() + b.handshake())
    assert len(censor.state()["tcbs"]) == 2
    assert fires(censor, b.c("PA", WORD))
    assert set(censor.state()["flagged_ips"]) == {C, S}
    v = censor.process(a.s("PA", b"benign"))  # any later packet from either IP
    assert not v.drop and {i.dst for i in v.inject} == {C, S}
    assert censor.detections[-1]["reason"] == "flagged-ip"


def test_censor10_verifies_checksums():
    censor, conn = geneva.make("censor10"), Conn()
    feed(censor, conn.handshake())
    censor.process(conn.c("R", seq=conn.cseq, chksum=0xBEEF))  # ignored: bad checksum
    assert not censor.state()["resynchronize"]
    bad = conn.c("PA", WORD, seq=conn.cseq, chksum=0x1234)
    assert not fires(censor, bad)  # nor is a bad-checksum keyword packet read
    assert fires(censor, conn.c("PA", WORD))


def test_censor10_a_valid_rst_makes_it_skip_the_next_in_sequence_packet():
    censor, conn = geneva.make("censor10"), Conn()
    feed(censor, conn.handshake())
    censor.process(conn.c("R", seq=conn.cseq, ttl=2))  # never reaches the server
    assert censor.state()["resynchronize"]
    assert not fires(censor, conn.c("PA", WORD))  # re-bases the TCB, unread
    assert fires(censor, conn.c("PA", WORD))  # the next one is read again


def test_censor10_reads_a_data_offset_below_5_which_censor11_ignores():
    for name, censored in (("censor10", True), ("censor11", False)):
        censor, conn = geneva.make(name), Conn()
        feed(censor, conn.handshake())
        p = conn.c("PA", b"\0" * 20 + WORD, seq=conn.cseq, dataofs=0)
        assert fires(censor, p) is censored, name


def test_censor11_resynchronises_on_a_pure_ack_and_on_fin_ack():
    censor, conn = geneva.make("censor11"), Conn()
    feed(censor, conn.handshake())
    censor.process(conn.c("A", seq=conn.cseq + 3000))  # moves the TCB (censor10 would not)
    assert not fires(censor, conn.c("PA", WORD))
    censor, conn = geneva.make("censor11"), Conn()
    feed(censor, conn.handshake())
    censor.process(conn.c("FA", seq=conn.cseq))  # a matching FIN/ACK: resync
    assert not fires(censor, conn.c("PA", WORD))
    censor10, conn = geneva.make("censor10"), Conn()
    feed(censor10, conn.handshake())
    censor10.process(conn.c("A", seq=conn.cseq + 3000))
    censor10.process(conn.c("FA", seq=conn.cseq))
    assert fires(censor10, conn.c("PA", WORD))


# -- scapy's view of a packet ---------------------------------------------------------

def test_scapy_flag_strings():
    assert geneva.scapy_flags(packet.SYN) == "S"
    assert geneva.scapy_flags(packet.SYN | packet.ACK) == "SA"
    assert geneva.scapy_flags(packet.FIN | packet.PSH | packet.ACK) == "FPA"
    assert geneva.scapy_flags(packet.SYN | 0x40 | 0x80) == "SEC"


def test_scapy_str_len_is_the_bytes_repr():
    assert geneva.scapy_str_len(b"facebook") == len("b'facebook'")
    assert geneva.scapy_str_len(b"\x00'") == len(str(b"\x00'"))
    assert geneva.scapy_str_len(b"") == 0


_OPTIONS = st.lists(st.sampled_from([("MSS", 1460), ("NOP", None), ("WScale", 7),
                                     ("SAckOK", b""), ("Timestamp", (1, 2))]), max_size=5)


@settings(max_examples=150, deadline=None)
@given(_OPTIONS, st.binary(max_size=40), st.integers(0, 0xFFFF), st.booleans())
def test_checksum_check_agrees_with_scapy(options, payload, chksum, use_real):
    p = IP(src=C, dst=S) / TCP(sport=1, dport=2, flags="PA", options=options) / payload
    raw = bytearray(bytes(p))
    if not use_real:
        raw[20 + 16:20 + 18] = chksum.to_bytes(2, "big")
    pkt = packet.parse(bytes(raw))
    assert pkt is not None
    again = IP(bytes(raw))
    reported = again[TCP].chksum
    del again[TCP].chksum
    expected = IP(bytes(again))[TCP].chksum == reported
    assert geneva.scapy_checksum_ok(pkt) is expected


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(geneva.CENSORS)),
       st.lists(st.tuples(st.sampled_from(["S", "SA", "A", "PA", "R", "RA", "F", "FA"]),
                          st.booleans(), st.integers(0, 2**32 - 1), st.binary(max_size=30),
                          st.integers(0, 15)), max_size=12))
def test_no_packet_sequence_crashes_a_censor(name, steps):
    censor = geneva.make(name, keyword=b"\x00\x01")
    for flags, from_client, seq, payload, dataofs in steps:
        src, dst = (C, S) if from_client else (S, C)
        raw = bytes(IP(src=src, dst=dst) / TCP(sport=40000, dport=7300, flags=flags, seq=seq,
                                               dataofs=max(dataofs, 0)) / payload)
        pkt = packet.parse(raw)
        assert pkt is not None
        v = censor.process(pkt)
        assert isinstance(v, geneva.Verdict)


# -- through the engine, as the censor process runs it -------------------------------------

def test_the_engine_runs_a_geneva_profile_and_emits_detections():
    effects = Effects()
    eng = Engine(load_profile("geneva-censor2"), clock=lambda: 0.0, rng=random.Random(0),
                 effects=effects)
    conn = Conn()
    for p in conn.handshake():
        assert not eng.handle(p, p.src == C).inject
    v = eng.handle(conn.c("PA", b"GET /ultrasurf"), True)
    assert not v.drop and [i.dst for i in v.inject] == [C]
    [det] = [e for e in effects.events if e["event"] == "detection"]
    assert det["detector"] == "geneva" and det["evidence"]["censor"] == "censor2"
