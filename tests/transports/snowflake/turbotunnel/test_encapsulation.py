"""Encapsulation: the captured prefixes, minimal encoding, arbitrary splits, padding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transports.snowflake.turbotunnel.encapsulation import (
    MAX_LEN,
    Decoder,
    EncapsulationError,
    encode,
    encode_padding,
)


def test_prefixes_seen_on_the_wire():
    """``a0`` before a 32-byte KCP packet, ``c0 54`` before 84 bytes
    (docs/transports/turbotunnel.md §2.1)."""
    assert encode(bytes(32))[:1] == b"\xa0"
    assert encode(bytes(84))[:2] == b"\xc0\x54"
    assert encode(bytes(63))[:1] == b"\xbf"
    assert encode(bytes(8191))[:2] == b"\xff\x7f"
    assert encode(bytes(8192))[:3] == b"\xc0\xc0\x00"
    assert len(encode(bytes(MAX_LEN))) == MAX_LEN + 3
    with pytest.raises(ValueError):
        encode(bytes(MAX_LEN + 1))


def test_non_minimal_prefixes_and_padding_are_accepted():
    d = Decoder()
    assert d.feed(b"\xc0\x05hello") == [b"hello"]  # 2-byte prefix for a short chunk
    assert d.feed(encode_padding(100) + encode(b"x") + encode_padding(0)) == [b"x"]
    assert d.pending == 0


def test_a_four_byte_prefix_is_an_error():
    with pytest.raises(EncapsulationError):
        Decoder().feed(b"\xc0\x80\x80\x01")


@given(st.lists(st.binary(max_size=9000), max_size=8), st.data())
def test_round_trip_through_any_split(chunks, data):
    wire = b"".join(encode(c) for c in chunks)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    d, got, last = Decoder(), [], 0
    for cut in [*cuts, len(wire)]:
        got += d.feed(wire[last:cut])
        last = cut
    assert got == chunks and d.pending == 0


@given(st.binary(max_size=300))
def test_garbage_only_ever_raises_encapsulation_error(blob):
    try:
        Decoder().feed(blob)
    except EncapsulationError:
        pass
