"""obfs4 packets: layout, padBurst arithmetic, the one-call encoder and the decoder."""

import hashlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.obfs4 import packet
from transports.obfs4.framing import (
    KEY_LENGTH,
    MAXIMUM_SEGMENT_LENGTH,
    Decoder,
    Encoder,
    FramingError,
    TagMismatchError,
)
from transports.obfs4.packet import (
    MAX_PACKET_PAYLOAD_LENGTH,
    PACKET_TYPE_PAYLOAD,
    PACKET_TYPE_PRNG_SEED,
    PacketDecoder,
    PacketEncoder,
    PacketError,
    burst_pad_length,
    make_packet,
    make_packets,
    make_seed_packet,
    padding_packets,
    parse_packet,
)

KM = hashlib.shake_256(b"ptlab obfs4 packet test").digest(KEY_LENGTH)


def pair():
    return PacketEncoder(Encoder(KM)), PacketDecoder(Decoder(KM))


def test_packet_layout():
    assert make_packet(PACKET_TYPE_PAYLOAD, b"abc", 2) == b"\x00\x00\x03abc\x00\x00"
    assert make_seed_packet(bytes(range(24))) == b"\x01\x00\x18" + bytes(range(24))
    assert parse_packet(b"\x00\x00\x03abc\x00\x00") == (0, b"abc")
    assert parse_packet(b"\x07\x00\x00") == (7, b"")
    assert MAX_PACKET_PAYLOAD_LENGTH == 1427 and packet.HEADER_LENGTH == 21
    with pytest.raises(ValueError):
        make_packet(PACKET_TYPE_PAYLOAD, bytes(1427), 1)
    with pytest.raises(ValueError):
        make_seed_packet(bytes(23))


@pytest.mark.parametrize("bad", [b"", b"\x00", b"\x00\x00", b"\x00\x00\x01", b"\x00\x05\x00abcd"])
def test_parse_packet_rejects_bad_lengths(bad):
    with pytest.raises(PacketError):
        parse_packet(bad)


def test_make_packets_splits_at_1427():
    data = os.urandom(3000)
    pkts = make_packets(data)
    assert [len(p) for p in pkts] == [1430, 1430, 3 + 3000 - 2 * 1427]
    assert b"".join(parse_packet(p)[1] for p in pkts) == data
    assert make_packets(b"") == []


def wire_len(pkts):
    return sum(len(p) + 18 for p in pkts)


def test_padding_is_counted_in_wire_bytes_like_padburst():
    assert padding_packets(0) == []
    for pad in (22, 100, 1448):
        assert wire_len(padding_packets(pad)) == pad
    for pad in (1, 21):  # too small for one frame: one full frame plus one of 21 + pad
        pkts = padding_packets(pad)
        assert [wire_len([p]) for p in pkts] == [1448, 21 + pad]
    with pytest.raises(ValueError):
        padding_packets(1449)


def test_burst_pad_length():
    assert burst_pad_length(0, 500) == 500
    assert burst_pad_length(1448 * 3 + 100, 500) == 400
    assert burst_pad_length(1448 + 600, 500) == 1448 - 600 + 500


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=5000), st.sampled_from([0, 1, 21, 22, 500, 1448]))
def test_packet_encoder_equals_framing_the_packets(data, pad):
    fast = PacketEncoder(Encoder(KM)).encode(data, pad)
    slow = Encoder(KM).encode_many(make_packets(data, pad))
    assert fast == slow


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=6000), st.integers(0, 1448))
def test_encode_burst_ends_on_target(data, target):
    wire = PacketEncoder(Encoder(KM)).encode_burst(data, target)
    n_data = -(-len(data) // 1427)
    burst = len(data) + 21 * n_data
    pad = burst_pad_length(burst, target)
    assert len(wire) == burst + (pad if pad > 21 or pad == 0 else 1448 + 21 + pad)
    if pad > 21 or pad == 0:
        assert len(wire) % MAXIMUM_SEGMENT_LENGTH == target % MAXIMUM_SEGMENT_LENGTH
    got, seeds = PacketDecoder(Decoder(KM)).feed(wire)
    assert (got, seeds) == (data, [])


def test_seed_frame_is_45_bytes_and_reaches_the_decoder():
    enc, dec = pair()
    seed = os.urandom(24)
    wire = enc.encode_seed(seed) + enc.encode(b"hello", 30)
    assert len(enc.encode_seed(seed)) == 45
    assert dec.feed(wire) == (b"hello", [seed])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=4000), st.integers(0, 1448)), max_size=6),
       st.lists(st.integers(0, 40000), max_size=6))
def test_round_trip_with_padding_and_arbitrary_splits(writes, cuts):
    enc, dec = pair()
    wire = b"".join(enc.encode(data, pad) for data, pad in writes)
    points = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})
    got = b""
    for a, b in zip(points, points[1:], strict=False):
        data, seeds = dec.feed(wire[a:b])
        got += data
        assert seeds == []
    assert got == b"".join(data for data, _ in writes)


def test_unknown_types_and_odd_seeds_are_ignored():
    frames = [make_packet(0x42, b"ignored"), make_packet(PACKET_TYPE_PRNG_SEED, bytes(23)),
              make_packet(PACKET_TYPE_PAYLOAD, b"kept"), make_packet(PACKET_TYPE_PAYLOAD)]
    wire = Encoder(KM).encode_many(frames)
    assert PacketDecoder(Decoder(KM)).feed(wire) == (b"kept", [])


@pytest.mark.parametrize("bad", [b"\x00\x00", b"\x00\x00\x05abc"])
def test_bad_packets_are_fatal_and_keep_earlier_data(bad):
    wire = Encoder(KM).encode_many([make_packet(PACKET_TYPE_PAYLOAD, b"before"), bad,
                                    make_packet(PACKET_TYPE_PAYLOAD, b"after")])
    dec = PacketDecoder(Decoder(KM))
    with pytest.raises(PacketError) as info:
        dec.feed(wire)
    assert info.value.data == b"before"
    with pytest.raises(PacketError):
        dec.feed(b"")


def test_frame_errors_carry_the_data_decoded_before_them():
    enc = Encoder(KM)
    wire = bytearray(PacketEncoder(enc).encode(b"good") + PacketEncoder(enc).encode(b"bad"))
    wire[-1] ^= 0x80
    dec = PacketDecoder(Decoder(KM))
    with pytest.raises(TagMismatchError) as info:
        dec.feed(bytes(wire))
    assert info.value.data == b"good"
    with pytest.raises(FramingError):
        dec.feed(b"more")


@settings(max_examples=200, deadline=2000)
@given(st.binary(max_size=3000))
def test_garbage_only_raises_framing_errors(junk):
    try:
        PacketDecoder(Decoder(KM)).feed(junk)
    except FramingError:
        pass
