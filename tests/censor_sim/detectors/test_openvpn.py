"""Xue et al. 2022's OpenVPN fingerprints (docs/censors/vpn.md §2).

The handshake vectors are a real session between two Debian OpenVPN 2.6 processes in
TLS mode (captured on loopback, over UDP and over TCP): opcode bytes and sizes in
arrival order. Flows are then continued with data packets as OpenVPN sends them.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from censor_sim.detectors import openvpn as ov
from censor_sim.inspectors import DONE, Match, OpenVpnInspector
from tests.support.flows import tcp_flow, udp_flow

# (c2s, opcode byte, size): OpenVPN 2.6.14, p2p TLS mode, UDP. Opcodes 7, 8, 4, 5, 9.
UDP_HANDSHAKE = [(True, 0x38, 14), (False, 0x40, 26), (True, 0x20, 303), (False, 0x20, 846),
                 (True, 0x20, 988), (False, 0x20, 192), (False, 0x20, 350), (True, 0x28, 30),
                 (True, 0x28, 34), (False, 0x48, 72), (True, 0x48, 72)]
DATA = 0x48  # P_DATA_V2, key id 0


def session(extra: int = 100, rng: random.Random | None = None) -> list[tuple[bool, int, int]]:
    rng = rng or random.Random(1)
    return UDP_HANDSHAKE + [(rng.random() < 0.5, DATA, rng.randrange(60, 1450))
                            for _ in range(extra)]


def payload(byte: int, size: int, rng: random.Random) -> bytes:
    return bytes([byte]) + rng.randbytes(size - 1)


# ------------------------------------------------------------------ opcode fingerprint


def test_a_real_session_is_flagged_at_packet_100_and_not_before():
    ops = [b for _, b, _ in session()]
    assert ov.opcode_fingerprint(ops[:99]) is None
    assert ov.opcode_fingerprint(ops[:100]) is True
    assert sorted({ov.opcode(b) for b in ops[:100]}) == [4, 5, 7, 8, 9]


def test_read_as_printed_algorithm_1_never_flags_vanilla_openvpn_2_6():
    """The printed algorithm leaves the resets out of its set: 4, 5, 9 is 3 < 4."""
    assert ov.opcode_fingerprint([b for _, b, _ in session()], literal=True) is False


def test_xor_obfuscation_does_not_hide_it():
    """Each opcode byte XORed with one key byte (the paper's Figure 4): still flagged."""
    assert ov.opcode_fingerprint([b ^ 0x5A for _, b, _ in session()]) is True


@pytest.mark.parametrize(("distinct", "flagged"), [(3, False), (4, True), (10, True),
                                                   (11, False)])
def test_the_distinct_opcode_bounds(distinct, flagged):
    ops = [100, 101] + [100 + i % distinct for i in range(2, distinct)]
    ops += [ops[-1]] * (ov.WINDOW - len(ops))
    if distinct >= 3:
        ops[2:distinct] = list(range(102, 100 + distinct))
    assert len(set(ops)) == distinct
    assert ov.opcode_fingerprint(ops) is flagged


def test_a_reset_seen_again_after_the_handshake_clears_the_flow():
    ops = [b for _, b, _ in session()]
    ops[50] = ops[0]  # the client reset again, after four distinct opcodes
    assert ov.opcode_fingerprint(ops) is False
    ops = [b for _, b, _ in session()]
    early = ops[:3] + [ops[0]] + ops[4:]  # a retransmitted reset during the handshake
    assert ov.opcode_fingerprint(early) is True


def test_random_bytes_are_cleared_early():
    rng = random.Random(3)
    f = ov.OpcodeFilter()
    for _ in range(ov.WINDOW):
        if f.add(rng.randrange(256)) is not None:
            break
    assert f.decision is False and len(f.seen) < 30


# --------------------------------------------------------------------- ACK fingerprint


def ack_sizes(bins: list[int], ack: int = 54) -> list[int]:
    """Sizes of a 100-packet flow whose packet 2 is an ACK, with ``bins`` ACK-sized
    packets per 10-packet bin; every other packet is 1,000 bytes."""
    sizes = []
    for count in bins:
        chunk = [1000] * 10
        for j in range(count):
            chunk[j] = ack
        sizes += chunk
    if sizes[2] != 54:  # put one ACK at index 2, taken from the same bin
        j = sizes.index(54) if 54 in sizes[:10] else 0
        sizes[j], sizes[2] = 1000, 54
    return sizes


def test_table_2_holds_on_an_openvpn_like_ack_profile():
    assert ov.ack_bins(ack_sizes([3, 4, 2, 1, 0, 1, 0, 0, 0, 0])) == [3, 4, 2, 1, 0, 1, 0, 0, 0, 0]
    assert ov.ack_fingerprint(ack_sizes([3, 4, 2, 1, 0, 1, 0, 0, 0, 0])) is True


@pytest.mark.parametrize(("bins", "ok"), [
    ([4, 4, 0, 0, 0, 0, 0, 0, 0, 0], False),  # bin 1 above 3
    ([1, 1, 0, 0, 0, 0, 0, 0, 0, 0], False),  # bin 2 below 2
    ([1, 2, 0, 0, 0, 0, 0, 0, 0, 0], True),
    ([1, 5, 5, 5, 5, 1, 1, 1, 1, 1], True),   # every bound at its limit
    ([1, 6, 0, 0, 0, 0, 0, 0, 0, 0], False),  # bin 2 above 5
    ([1, 2, 6, 0, 0, 0, 0, 0, 0, 0], False),  # bins 3-5 above 5
    ([1, 2, 0, 0, 0, 2, 0, 0, 0, 0], False),  # bin 6 on above 1
    ([1, 2, 0, 0, 0, 0, 0, 0, 0, 2], False),
])
def test_table_2_boundaries(bins, ok):
    sizes = ack_sizes(bins)
    assert ov.ack_bins(sizes) == bins
    assert ov.ack_fingerprint(sizes) is ok


def test_the_ack_fingerprint_waits_for_the_window():
    assert ov.ack_fingerprint(ack_sizes([1, 2] + [0] * 8)[:99]) is None


def test_the_ack_fingerprint_fails_early_only_when_no_packet_to_come_can_save_it():
    # Bin 2 needs 2 to 5 ACK-sized packets: with one, it fails when its tenth is in.
    short = ack_sizes([1, 1] + [0] * 8)
    assert not ov.ack_fingerprint_failed(short[:19])
    assert ov.ack_fingerprint_failed(short[:20])
    # Over a bound fails at once, in a bin still filling: the fourth ACK of bin 1 ...
    four = ack_sizes([4, 2] + [0] * 8)
    assert not ov.ack_fingerprint_failed(four[:3])
    assert ov.ack_fingerprint_failed(four[:4])
    # ... and the second of a bin from the sixth on (at most 1 there).
    late = ack_sizes([1, 2, 0, 0, 0, 2, 0, 0, 0, 0])
    assert not ov.ack_fingerprint_failed(late[:51])
    assert ov.ack_fingerprint_failed(late[:52])
    # A profile that holds never fails, at any length; nor does one too short to know.
    good = ack_sizes([3, 4, 2, 1, 0, 1, 0, 0, 0, 0])
    assert not any(ov.ack_fingerprint_failed(good[:k]) for k in range(101))
    # A window that is not a whole number of bins: its last bin ends at n.
    assert ov.ack_fingerprint_failed(short[:15], n=15) and not ov.ack_fingerprint_failed(
        short[:14], n=15)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([54, 54, 1000, 1000, 1000, 77]), min_size=100, max_size=100))
def test_an_early_failure_of_the_ack_fingerprint_is_final(sizes):
    """What ack_fingerprint_failed says of any prefix, the full window confirms."""
    final = ov.ack_fingerprint(sizes)
    assert ov.ack_fingerprint_failed(sizes) == (final is False)
    if any(ov.ack_fingerprint_failed(sizes[:k]) for k in range(100)):
        assert final is False


# ------------------------------------------------------------------------ TCP framing


def framed(records: list[tuple[int, int]], rng: random.Random) -> bytes:
    return b"".join((size - 2).to_bytes(2, "big") + payload(byte, size - 2, rng)
                    for byte, size in records)


def test_the_framer_finds_records_across_any_segmentation():
    rng = random.Random(5)
    records = [(b, s + 2) for _, b, s in session(40, rng)]
    stream = framed(records, rng)
    framer, seq, out, pos = ov.TcpFramer(), 1000, [], 0
    while pos < len(stream):
        n = rng.randrange(1, 1500)
        out += framer.feed(seq + pos, stream[pos : pos + n])
        pos += n
    assert out == records and not framer.broken


def test_the_framer_skips_retransmissions_and_stops_at_a_gap():
    rng = random.Random(6)
    stream = framed([(0x38, 16), (0x20, 300)], rng)
    framer = ov.TcpFramer()
    assert framer.feed(1, stream[:10]) == [(0x38, 16)]
    assert framer.feed(1, stream[:10]) == []  # the same segment again
    assert framer.feed(5, stream[4:20]) == [(0x20, 300)]  # overlaps, then new bytes
    assert framer.feed(400, b"xyz") == [] and framer.broken  # a hole before it


@pytest.mark.parametrize("first", [b"\x16\x03\x01\x02\x00", b"GET / HTTP/1.1", b"\x00\x00\x38",
                                   b"SSH-2.0-x"])
def test_tls_http_and_a_zero_length_break_the_framing_at_once(first):
    framer = ov.TcpFramer()
    framer.feed(1, first)
    assert framer.broken


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.binary(max_size=64)), max_size=12))
def test_the_framer_answers_for_any_segments(segments):
    framer = ov.TcpFramer()
    for seq, data in segments:
        for byte, size in framer.feed(seq, data):
            assert 0 <= byte < 256 and 3 <= size <= ov.MAX_LEN + 2


# ------------------------------------------------------------------------- inspector


def run(fed, packets: list[tuple[bool, bytes]], params: dict | None = None):
    insp = OpenVpnInspector("ovpn", params or {})
    for i, (c2s, data) in enumerate(packets):
        pkt = fed.add(c2s, data)
        res = insp.inspect(fed.flow, pkt, c2s)
        if res is not None:
            return i, res
    return len(packets), None


def test_the_inspector_flags_a_udp_session_at_its_hundredth_packet():
    rng = random.Random(7)
    i, res = run(udp_flow(), [(c, payload(b, s, rng)) for c, b, s in session()])
    assert i == 99 and isinstance(res, Match)
    assert res.evidence["by"] == "opcode" and res.evidence["first_opcodes"] == [7, 8]


def test_the_inspector_flags_a_tcp_session_through_its_framing():
    rng = random.Random(8)
    fed = tcp_flow()
    packets = []
    for c2s, b, s in session():
        rec = s.to_bytes(2, "big") + payload(b, s, rng)
        half = len(rec) // 3  # records split over segments
        packets += [(c2s, rec[:half]), (c2s, rec[half:])]
    i, res = run(fed, packets)
    assert isinstance(res, Match) and res.evidence["packets"] == 100


def test_the_inspector_lets_tls_go_on_its_first_payload():
    i, res = run(tcp_flow(443), [(True, b"\x16\x03\x01\x02\x00" + bytes(512))])
    assert (i, res) == (0, DONE)


def test_random_udp_is_let_go_before_the_window_with_the_ack_fingerprint_off():
    rng = random.Random(9)
    i, res = run(udp_flow(), [(True, rng.randbytes(100)) for _ in range(100)], {"ack": False})
    assert res == DONE and i < 40


def test_quic_like_udp_is_let_go_once_both_fingerprints_have_failed():
    """Short-header QUIC: random first bytes and sizes. The opcode fingerprint fails
    within a bin or two; the ACK fingerprint (on, as in the paper) at the end of
    bin 2, which can hold at most one more packet of packet 3's size, not two."""
    rng = random.Random(10)
    packets = [(True, b"\xc3" + rng.randbytes(1199)), (False, b"\xc1" + rng.randbytes(1199))]
    packets += [(rng.random() < 0.5, bytes([0x40 | rng.randrange(64)])
                 + rng.randbytes(rng.randrange(40, 1300))) for _ in range(98)]
    i, res = run(udp_flow(), packets)
    assert res == DONE and i == 19  # the 20th packet: bin 2 is complete


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0x38, 0x40, 0x20, 0x28, 0x48, 0x50, 0x58, 0x60,
                                           0x68, 0x70, 0x78, 0x80]),
                          st.sampled_from([14, 26, 54, 54, 72, 1000])),
                min_size=30, max_size=30))
# A flow only the ACK fingerprint flags, late: the opcode fingerprint fails at packet
# 6 (a reset after four distinct bytes), and bin 2 gets its two ACK-sized packets
# only at its end; a stop that judged bin 2 before it filled would let it go.
@example([(0x38, 14), (0x40, 26), (0x20, 54), (0x28, 1000), (0x48, 1000), (0x38, 1000)]
         + [(0x48, 1000)] * 12 + [(0x48, 54)] * 2 + [(0x48, 1000)] * 10)
def test_stopping_early_never_changes_the_filters_verdict(records):
    """Against Algorithm 1 and Table 2 over the whole window (n = 30): a flow either
    fingerprint flags is flagged, and one neither flags is let go, early or at n."""
    rng = random.Random(0)
    _, res = run(udp_flow(), [(True, payload(b, s, rng)) for b, s in records], {"n": 30})
    flagged = (ov.opcode_fingerprint([b for b, _ in records], 30)
               or ov.ack_fingerprint([s for _, s in records], 30))
    assert isinstance(res, Match) if flagged else res == DONE


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=80)), max_size=30),
       st.booleans())
def test_the_inspector_never_raises(packets, tcp):
    _, res = run(tcp_flow() if tcp else udp_flow(), packets, {"n": 10})
    assert res is None or res == DONE or isinstance(res, Match)
