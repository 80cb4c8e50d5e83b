"""ScrambleSuit's UniformDH handshake: both sides agree, marks hide anywhere the pads
put them, epoch hours and replays are checked, and garbage never crashes the parser."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.scramblesuit import uniformdh
from transports.scramblesuit.handshake import (
    MAC_LENGTH,
    MAX_HANDSHAKE,
    MAX_PAD,
    ClientHandshake,
    HandshakeError,
    mac128,
    parse_client_hello,
    server_response,
)

K_B = bytes(range(20))
NOW = 1_795_000_000.0


def replay_filter():
    seen: set[bytes] = set()

    def check(mac: bytes) -> bool:
        if mac in seen:
            return True
        seen.add(mac)
        return False
    return check


@pytest.mark.parametrize("client_pad, server_pad", [(0, 0), (MAX_PAD, MAX_PAD), (77, 500)])
def test_both_sides_agree_on_the_master_key(client_pad, server_pad):
    client = ClientHandshake(K_B, pad_len=client_pad, now=lambda: NOW)
    hello_bytes = client.generate()
    assert len(hello_bytes) == 192 + client_pad + 2 * MAC_LENGTH <= MAX_HANDSHAKE
    assert hello_bytes[-32:-16] == mac128(K_B, hello_bytes[:192])  # M_C = MAC(X)
    hello = parse_client_hello(hello_bytes, K_B, NOW, replay_filter())
    assert hello is not None and hello.consumed == len(hello_bytes)
    response, server_key = server_response(K_B, hello, pad_len=server_pad)
    done = client.parse_server(response + b"first frame")
    assert done == (len(response), server_key)


def test_incomplete_handshakes_wait_for_more():
    client = ClientHandshake(K_B, pad_len=300, now=lambda: NOW)
    hello_bytes = client.generate()
    for cut in (0, 100, 192, 191 + 32, len(hello_bytes) - 1):
        assert parse_client_hello(hello_bytes[:cut], K_B, NOW) is None
    hello = parse_client_hello(hello_bytes, K_B, NOW)
    response, _ = server_response(K_B, hello, pad_len=10)
    assert client.parse_server(response[:-1]) is None


def test_the_epoch_hour_may_be_off_by_one_but_not_two():
    for skew, ok in ((0, True), (3600, True), (-3600, True), (7200, False), (-7200, False)):
        hello_bytes = ClientHandshake(K_B, now=lambda s=skew: NOW + s).generate()
        if ok:
            assert parse_client_hello(hello_bytes, K_B, NOW) is not None
        else:
            with pytest.raises(HandshakeError, match="does not verify"):
                parse_client_hello(hello_bytes, K_B, NOW)


def test_a_replayed_handshake_and_a_wrong_secret_are_refused():
    seen = replay_filter()
    hello_bytes = ClientHandshake(K_B, now=lambda: NOW).generate()
    assert parse_client_hello(hello_bytes, K_B, NOW, seen) is not None
    with pytest.raises(HandshakeError, match="replayed"):
        parse_client_hello(hello_bytes, K_B, NOW, seen)
    # Another secret: no mark anywhere, so it waits until the maximum length.
    assert parse_client_hello(hello_bytes, bytes(20), NOW) is None
    with pytest.raises(HandshakeError, match="no mark"):
        parse_client_hello(hello_bytes + os.urandom(MAX_HANDSHAKE), bytes(20), NOW)


def test_a_forged_server_mac_is_refused():
    client = ClientHandshake(K_B, now=lambda: NOW)
    hello = parse_client_hello(client.generate(), K_B, NOW)
    response, _ = server_response(K_B, hello, pad_len=0)
    forged = response[:-1] + bytes([response[-1] ^ 1])
    with pytest.raises(HandshakeError, match="server MAC"):
        client.parse_server(forged)


def test_public_keys_look_uniform_in_their_top_byte():
    """A fixed leading pattern would give UniformDH away: p - X flips it half the time."""
    tops = {uniformdh.new_keypair().public[0] >> 6 for _ in range(40)}
    assert len(tops) >= 3


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=2000))
def test_garbage_is_incomplete_or_an_error_never_a_crash(data):
    try:
        assert parse_client_hello(data, K_B, NOW) is None
    except HandshakeError:
        pass
