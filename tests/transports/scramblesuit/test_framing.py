"""ScrambleSuit frames: round trips in any split, exact padding, MAC and length checks."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.scramblesuit.framing import (
    FLAG_NEW_TICKET,
    FLAG_PAYLOAD,
    FLAG_PRNG_SEED,
    MAX_PAYLOAD,
    OVERHEAD,
    Decoder,
    Encoder,
    FrameError,
    session_keys,
)

MASTER = bytes(range(32))


def pair():
    c2s, s2c = session_keys(MASTER)
    return Encoder(c2s), Decoder(c2s), Encoder(s2c), Decoder(s2c)


def test_directions_have_their_own_keys_and_the_layout_is_go_s():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
    okm = HKDFExpand(hashes.SHA256(), 144, None).derive(MASTER)
    c2s, s2c = session_keys(MASTER)
    assert (c2s.aes_key, c2s.iv_prefix, c2s.mac_key) == (okm[0:32], okm[32:40], okm[80:112])
    assert (s2c.aes_key, s2c.iv_prefix, s2c.mac_key) == (okm[40:72], okm[72:80], okm[112:144])


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=5000), cuts=st.lists(st.integers(1, 700), max_size=20))
def test_payload_round_trips_in_any_split(data, cuts):
    enc, dec, _, _ = pair()
    wire = enc.payload(data) + enc.frame(FLAG_PRNG_SEED, b"s" * 32) + enc.padding(100)
    got: list = []
    pos = 0
    for cut in cuts + [len(wire)]:
        got += dec.feed(wire[pos:pos + cut])
        pos += cut
    payload = b"".join(p for f, p in got if f == FLAG_PAYLOAD)
    assert payload == data
    assert (FLAG_PRNG_SEED, b"s" * 32) in got


@pytest.mark.parametrize("length", [0, OVERHEAD, 22, 1447, 1448, 1449, 1469, 2000, 2896, 4000])
def test_padding_is_exactly_the_asked_length(length):
    enc, dec, _, _ = pair()
    pad = enc.padding(length)
    assert len(pad) == length
    assert all(f == FLAG_PAYLOAD and p == b"" for f, p in dec.feed(pad))


def test_frames_are_bounded_and_tampering_is_caught():
    enc, dec, _, _ = pair()
    with pytest.raises(ValueError):
        enc.frame(FLAG_PAYLOAD, b"x" * (MAX_PAYLOAD + 1))
    wire = bytearray(enc.frame(FLAG_NEW_TICKET, os.urandom(144)))
    wire[30] ^= 1
    with pytest.raises(FrameError, match="MAC"):
        dec.feed(bytes(wire))


def test_a_frame_with_an_unknown_flag_or_from_the_other_direction_is_refused():
    enc, dec, _, s_dec = pair()
    with pytest.raises(FrameError, match="flags"):
        dec.feed(enc.frame(8, b"x"))
    c_enc = pair()[0]
    with pytest.raises(FrameError):
        s_dec.feed(c_enc.frame(FLAG_PAYLOAD, b"hello" * 50))


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=3000))
def test_garbage_is_an_error_or_incomplete_never_a_crash(data):
    _, dec, _, _ = pair()
    try:
        dec.feed(data)
    except FrameError:
        pass
