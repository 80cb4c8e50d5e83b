"""obfs4's ntor: the ptrs known-answer test, agreement, zero-secret rejection and the KDF."""

import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_scalarmult

from transports.common import ntor
from transports.common.elligator2 import (
    Keypair,
    new_keypair,
    public_key_from_private,
    representative_to_public,
)

# jmwample/ptrs crates/obfs4/src/handshake/integration.rs::test_obfs4_testvec_compat,
# with standard (clean) X25519 public keys.
KAT_B = "a83fdd04eb9ed77a2b38d86092a09a1cecfb93a7bdec0da35e542775b2e7af6e"
KAT_X = "308ff4f3a0ebe8c1a93bcd40d67e3eec6b856aa5c07ef6d5a3d3cedf13dcf150"
KAT_Y = "881f9ad60e0833a627f0c47f5aafbdcb0b5471800eaeaa1e678291b947e4295c"
KAT_ID = "000102030405060708090a0b0c0d0e0f10111213"
KAT_KEY_SEED = "05b858d18df21a01566c74d39a5b091b4415f103c05851e77e79b274132dc5b5"
KAT_AUTH = "dc71f8ded2e56f829f1b944c1e94357fa8b7987f10211a017e2d1f2455092917"


def clean(hex_private: str) -> Keypair:
    private = bytes.fromhex(hex_private)
    return Keypair(private, public_key_from_private(private))


def test_ptrs_known_answer():
    b, x, y, node_id = clean(KAT_B), clean(KAT_X), clean(KAT_Y), bytes.fromhex(KAT_ID)
    ok, seed, auth = ntor.client_handshake(x, y.public, b.public, node_id)
    assert ok
    assert seed.hex() == KAT_KEY_SEED
    assert auth.hex() == KAT_AUTH
    assert ntor.server_handshake(x.public, y, b, node_id) == (True, seed, auth)


def test_tor_transcript_order_does_not_match_the_known_answer():
    """Documents why the B|B|X|Y|PROTOID|ID order must not be 'fixed' to Tor's."""
    b, x, y, node_id = clean(KAT_B), clean(KAT_X), clean(KAT_Y), bytes.fromhex(KAT_ID)
    secret = crypto_scalarmult(x.private, y.public) + crypto_scalarmult(x.private, b.public)
    tor_suffix = node_id + b.public + x.public + y.public + ntor.PROTO_ID
    tor_seed = hmac.new(ntor.T_KEY, secret + tor_suffix, hashlib.sha256).hexdigest()
    assert tor_seed != KAT_KEY_SEED


@settings(max_examples=50, deadline=None)
@given(st.binary(min_size=20, max_size=20))
def test_client_and_server_agree(node_id):
    identity = new_keypair()
    client = new_keypair(elligator=True)
    server = new_keypair(elligator=True)
    c = ntor.client_handshake(client, representative_to_public(server.representative),
                              identity.public, node_id)
    s = ntor.server_handshake(representative_to_public(client.representative), server,
                              identity, node_id)
    assert c[0] and s[0]
    assert c == s


def test_wrong_identity_or_node_id_changes_auth():
    identity, client, server = new_keypair(), new_keypair(True), new_keypair(True)
    node_id = bytes(20)
    _, _, auth = ntor.server_handshake(client.public, server, identity, node_id)
    _, _, auth_other_id = ntor.client_handshake(client, server.public, identity.public,
                                                b"\x01" * 20)
    _, _, auth_other_b = ntor.client_handshake(client, server.public, new_keypair().public,
                                               node_id)
    assert auth not in (auth_other_id, auth_other_b)


# u = 0 (order 2 / identity image), u = 1 (order 4), and an order-8 u: X25519 gives zero.
LOW_ORDER_U = [
    bytes(32),
    (1).to_bytes(32, "little"),
    bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
]


@pytest.mark.parametrize("bad", LOW_ORDER_U)
def test_all_zero_shared_secret_is_rejected(bad):
    identity, client, server = new_keypair(), new_keypair(True), new_keypair(True)
    assert ntor.client_handshake(client, bad, identity.public, bytes(20))[0] is False
    assert ntor.client_handshake(client, server.public, bad, bytes(20))[0] is False
    assert ntor.server_handshake(bad, server, identity, bytes(20))[0] is False


def hkdf_sha256(ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869, written out, to check the library-backed kdf independently."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


@settings(max_examples=50)
@given(st.binary(min_size=32, max_size=32), st.integers(1, 255))
def test_kdf_is_hkdf_with_obfs4_labels(seed, length):
    assert ntor.kdf(seed, length) == hkdf_sha256(
        seed, b"ntor-curve25519-sha256-1:key_extract", b"ntor-curve25519-sha256-1:key_expand",
        length)


def test_kdf_known_answer_from_ptrs_seed():
    okm = ntor.kdf(bytes.fromhex(KAT_KEY_SEED), 144)
    assert okm == hkdf_sha256(bytes.fromhex(KAT_KEY_SEED), ntor.T_KEY, ntor.M_EXPAND, 144)
    c2s, s2c = ntor.derive_session_keys(bytes.fromhex(KAT_KEY_SEED))
    assert (c2s, s2c) == (okm[:72], okm[72:])


def test_bad_lengths():
    kp = new_keypair()
    with pytest.raises(ValueError):
        ntor.client_handshake(kp, bytes(31), kp.public, bytes(20))
    with pytest.raises(ValueError):
        ntor.server_handshake(kp.public, kp, kp, bytes(19))
