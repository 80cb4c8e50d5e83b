"""obfs4 frames: wire layout against an independent model, round trips, hostile input."""

import hashlib
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_secretbox, crypto_secretbox_open
from siphash24 import siphash24

from transports.obfs4 import framing
from transports.obfs4.framing import (
    FRAME_OVERHEAD,
    KEY_LENGTH,
    MAX_NONCE_COUNTER,
    MAXIMUM_FRAME_PAYLOAD_LENGTH,
    MAXIMUM_SEGMENT_LENGTH,
    Decoder,
    Encoder,
    FramingError,
    InvalidLengthError,
    InvalidPayloadLengthError,
    NonceCounterWrappedError,
    TagMismatchError,
)

KM = hashlib.shake_256(b"ptlab obfs4 framing test").digest(KEY_LENGTH)


@pytest.fixture(params=["libsodium", "public-api"])
def backend(request, monkeypatch):
    """Run a test on the cffi fast path and on the public nacl.bindings fallback."""
    if request.param == "public-api":
        monkeypatch.setattr(framing, "_lib", None)
        monkeypatch.setattr(framing, "_ffi", None)
    return request.param


def reference_frames(km: bytes, payloads: list[bytes]) -> bytes:
    """docs/transports/obfs4.md §3 written out naively: PyNaCl's padded secretbox,
    SipHash rehashing the whole block history for every mask, nonce = prefix |
    BE64(counter from 1)."""
    key, prefix, sip_key, block = km[:32], km[32:48], km[48:64], km[64:72]
    history = block
    out = b""
    for counter, payload in enumerate(payloads, start=1):
        box = crypto_secretbox(payload, prefix + counter.to_bytes(8, "big"), key)
        block = siphash24(history, key=sip_key).digest()
        history += block
        mask = int.from_bytes(block[:2], "big")
        out += ((len(box)) ^ mask).to_bytes(2, "big") + box
    return out


def test_constants_match_the_go_code():
    assert MAXIMUM_SEGMENT_LENGTH == 1448
    assert FRAME_OVERHEAD == 18
    assert MAXIMUM_FRAME_PAYLOAD_LENGTH == 1430
    assert (framing.MIN_FRAME_LENGTH, framing.MAX_FRAME_LENGTH) == (16, 1446)
    assert KEY_LENGTH == 72


def test_key_material_layout():
    key, prefix, seed = framing.split_key_material(KM)
    assert (key, prefix, seed) == (KM[:32], KM[32:48], KM[48:72])
    okm = bytes(range(144))
    assert framing.directional_key_material(okm, server=False) == (okm[:72], okm[72:])
    assert framing.directional_key_material(okm, server=True) == (okm[72:], okm[:72])
    with pytest.raises(ValueError):
        Encoder(KM[:71])
    with pytest.raises(ValueError):
        framing.directional_key_material(okm[:143], server=True)


def test_wire_bytes_match_the_reference_model(backend):
    payloads = [b"", b"x", os.urandom(100), os.urandom(MAXIMUM_FRAME_PAYLOAD_LENGTH), b"tail"]
    enc = Encoder(KM)
    wire = enc.encode(payloads[0]) + enc.encode_many(payloads[1:3]) + enc.encode_many(
        iter(payloads[3:]))
    assert wire == reference_frames(KM, payloads)
    assert enc.counter == len(payloads) + 1


def test_decoder_reads_the_reference_model(backend):
    payloads = [os.urandom(n) for n in (0, 1, 700, 1430, 3)]
    assert Decoder(KM).feed(reference_frames(KM, payloads)) == payloads


def test_secretbox_open_of_a_frame_by_hand():
    wire = Encoder(KM).encode(b"hello")
    box = wire[2:]
    assert crypto_secretbox_open(box, KM[32:48] + (1).to_bytes(8, "big"), KM[:32]) == b"hello"
    assert len(wire) == 5 + FRAME_OVERHEAD


payload_lists = st.lists(st.binary(max_size=MAXIMUM_FRAME_PAYLOAD_LENGTH), max_size=12)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=payload_lists, cuts=st.lists(st.integers(0, 20000), max_size=8))
def test_round_trip_with_arbitrary_splits(backend, payloads, cuts):
    enc, dec = Encoder(KM), Decoder(KM)
    wire = enc.encode_many(payloads)
    points = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})
    got = []
    for a, b in zip(points, points[1:], strict=False):
        got += dec.feed(wire[a:b])
    assert got == payloads
    assert dec.buffered == 0
    assert dec.counter == enc.counter


@settings(max_examples=30, deadline=None)
@given(st.lists(payload_lists, max_size=5))
def test_many_writes_then_one_read(batches):
    enc, dec = Encoder(KM), Decoder(KM)
    wire = b"".join(enc.encode_many(b) for b in batches)
    assert dec.feed(wire) == [p for b in batches for p in b]


def test_byte_at_a_time():
    payloads = [b"a" * 10, b"", b"b" * 1430]
    wire = Encoder(KM).encode_many(payloads)
    dec = Decoder(KM)
    got = []
    for i in range(len(wire)):
        got += dec.feed(wire[i:i + 1])
    assert got == payloads


def test_oversize_payload_is_rejected_without_changing_state():
    enc = Encoder(KM)
    with pytest.raises(InvalidPayloadLengthError):
        enc.encode(bytes(MAXIMUM_FRAME_PAYLOAD_LENGTH + 1))
    with pytest.raises(InvalidPayloadLengthError):
        enc.encode_many([b"ok", bytes(5000)])
    assert enc.counter == 1
    assert enc.encode(b"ok") == Encoder(KM).encode(b"ok")


def test_seal_in_place_checks_the_buffer():
    enc = Encoder(KM)
    with pytest.raises(ValueError):
        enc.seal_in_place(bytearray(10), [5])
    assert enc.seal_in_place(bytearray(10), []) == 0
    buf = bytearray(4 + 18 + 3)
    buf[4 + 18:] = b"abc"
    assert enc.seal_in_place(buf, [3], offset=4) == len(buf)
    assert Decoder(KM).feed(bytes(buf[4:])) == [b"abc"]


def test_tampering_is_a_tag_mismatch(backend):
    wire = bytearray(Encoder(KM).encode_many([b"one", b"two"]))
    wire[-1] ^= 1
    dec = Decoder(KM)
    with pytest.raises(TagMismatchError) as info:
        dec.feed(bytes(wire))
    assert info.value.partial == [b"one"]  # what decoded before the bad frame
    with pytest.raises(TagMismatchError) as again:  # errors are final
        dec.feed(b"")
    assert again.value.partial == []


def test_wrong_key_is_a_tag_mismatch():
    other = bytearray(KM)
    other[0] ^= 1  # same length masks, different secretbox key
    with pytest.raises(TagMismatchError):
        Decoder(bytes(other)).feed(Encoder(KM).encode(b"secret"))


def test_invalid_length_waits_then_fails():
    dec = Decoder(KM)
    mask = framing.HashDrbg(KM[48:]).length_mask()
    bad = (2000 ^ mask).to_bytes(2, "big")  # 2000 > 1446
    assert dec.feed(bad) == []
    assert dec.feed(bytes(15)) == []  # the random stand-in length is at least 16
    with pytest.raises(InvalidLengthError) as info:
        for _ in range(1446):
            assert dec.feed(b"\x00") == []
    assert isinstance(info.value, TagMismatchError)  # Go reports it as ErrTagMismatch


def test_nonce_counter_wrap():
    enc, dec = Encoder(KM), Decoder(KM)
    enc.counter = dec.counter = MAX_NONCE_COUNTER
    last = enc.encode(b"last frame")
    with pytest.raises(NonceCounterWrappedError):
        enc.encode(b"one too many")
    batch = Encoder(KM)
    batch.counter = MAX_NONCE_COUNTER
    with pytest.raises(NonceCounterWrappedError):
        batch.encode_many([b"a", b"b"])  # refused before any frame is sealed
    assert batch.counter == MAX_NONCE_COUNTER
    assert dec.feed(last) == [b"last frame"]
    with pytest.raises(NonceCounterWrappedError):
        dec.feed(b"\x00\x00")  # the next length field: the nonce would wrap


hostile = st.one_of(
    st.binary(max_size=4000),
    st.tuples(st.lists(st.binary(max_size=1430), min_size=1, max_size=4),
              st.integers(0, 10**6), st.integers(1, 255)),
)


@settings(max_examples=300, deadline=2000)
@given(hostile, st.lists(st.integers(1, 3000), max_size=4))
def test_hostile_input_only_raises_framing_errors(case, chunking):
    """Garbage, bit flips and truncations: FramingError or nothing, never a crash or hang."""
    if isinstance(case, bytes):
        wire = case
    else:
        payloads, pos, flip = case
        good = bytearray(Encoder(KM).encode_many(payloads))
        good[pos % len(good)] ^= flip
        wire = bytes(good[: len(good) - (pos % 7)])  # sometimes truncated too
    dec = Decoder(KM)
    chunks = []
    rest = wire
    for size in chunking:
        chunks.append(rest[:size])
        rest = rest[size:]
    chunks.append(rest)
    try:
        for chunk in chunks:
            for payload in dec.feed(chunk):
                assert isinstance(payload, bytes) and len(payload) <= 1430
    except FramingError:
        pass
    assert dec.buffered <= MAXIMUM_SEGMENT_LENGTH


def test_truncated_frame_returns_nothing():
    wire = Encoder(KM).encode(b"x" * 500)
    dec = Decoder(KM)
    assert dec.feed(wire[:-1]) == []
    assert dec.feed(wire[-1:]) == [b"x" * 500]
