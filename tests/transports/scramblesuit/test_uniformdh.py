"""UniformDH against obfs4proxy's known answers (common/uniformdh/uniformdh_test.go;
docs/transports/scramblesuit.md §2.1): an odd and an even private key, their public
keys, the shared secret."""

from __future__ import annotations

import pytest

from transports.scramblesuit.uniformdh import (
    SIZE,
    UniformDHError,
    keypair_from_bytes,
    new_keypair,
    shared_secret,
)

X_PRIV = bytes.fromhex(
    "6f592d676f536874746f20686e6b776f20736874206561676574202e6f592d67"
    "6f536874746f2068736974206568672074612e655920676f532d746f6f686874"
    "6920207368742065656b20796e6120647567726169646e616f20206668742065"
    "61676574202e61507473202c727073656e652c746620747572752c6561206c6c"
    "612065726f20656e6920206e6f592d676f536874746f2e68482020656e6b776f"
    "2073687772652065687420656c4f20646e4f736562206f72656b74207268756f")
X_PUB = bytes.fromhex(
    "76a3d17d5c55b03e865fa3e8267990a724baa24b0bdd0cc4af93be8de30be120"
    "d5533c91bf63ef923b02edcb84b744383f7de232cca6eb46d07cad83dcaa317f"
    "becbc68ca13e2c4019e6a3653106745004aecc0be1dff0a78733fb0e7d5cb7c4"
    "97cab77b1331bf347e5f3a7847aa0bc0f4bc64146b48407fed7b931d16972d25"
    "fb4da5e6dc074ce2a58daa8de7624247cdf2ebe4e4dfec6d5989aac778c87559"
    "d3213d6040d4111ce3a2acae19f9ee1532509e037f69b252fdc30243cbbce9d0")
Y_PRIV = bytes.fromhex(
    "736562206f72656b74207268756f68676f2020666c6f2c646120646e77206568"
    "657254206568207968736c61206c72626165206b68746f726775206867616961"
    "2e6e482020656e6b776f2073687772652065685479656820766120657274646f"
    "652072616874732766206569646c2c736120646e772065686572542065682079"
    "74736c69206c72746165206468746d65202c6e612064687720796f6e6f20656e"
    "63206e61622068656c6f206468546d6561202073685479657420657264610a2e")
Y_PUB = bytes.fromhex(
    "d04e156e554c37ffd7aba749df6623501e4ff4466cb12be055617c1a36872237"
    "36d2c3fdce9ee0f9b27774350849112aa5aeb1f126811c9c2f3a9cb13d2f0c3a"
    "7e6fa2d3bf71baf50d839171534f227efbb2ce4227a38c25abdc5ba7fc430111"
    "3a2cb2069c9b305faac4b72bf21fec71578a9c369bcac84e1a7dcf0754e342f5"
    "bc8fe4917441b88254435e2abaf297e93e1e57968672d45bd7d4c8ba1bc3d314"
    "889b5bc3d3e4ea33d4f2dfdd34e5e5a72ff24ee46316d4757dad09366a0b66b3")
SHARED = bytes.fromhex(
    "78afaf5f457f1fdb832bebc397644a33038be9dba10ca2ce4a076f327f3a0ce3"
    "151d477b869ee7ac467755292ad8a77db9bd87ffbbc39955bcfb03b1583888c8"
    "fd037834ff3f401d463c10f899aa6378445140b7f8386a7d509e7b9db19b677f"
    "062a7a1a4e1509604d7a0839ccd5da6173e10afd9eab6dda74539d60493ca37f"
    "a5c98cd9640b409cd8bb3be2bc5136fd42e764fc3f3c0ddb8db3d87abcf2e659"
    "8d2b101bef7a56f50ebc658f9df1287da81359543e77e4a4cfa7598a4152e4c0")


def test_known_answers_for_an_odd_and_an_even_private_key():
    assert X_PRIV[-1] & 1 and not Y_PRIV[-1] & 1
    x, y = keypair_from_bytes(X_PRIV), keypair_from_bytes(Y_PRIV)
    assert x.public == X_PUB and y.public == Y_PUB
    assert shared_secret(x, Y_PUB) == SHARED == shared_secret(y, X_PUB)


def test_random_pairs_agree_and_keys_are_192_bytes():
    for _ in range(5):
        a, b = new_keypair(), new_keypair()
        assert len(a.public) == SIZE and shared_secret(a, b.public) == shared_secret(b, a.public)


@pytest.mark.parametrize("bad", [b"", b"\x00" * 191, b"\x00" * SIZE, b"\xff" * SIZE])
def test_bad_public_keys_are_refused(bad):
    with pytest.raises(UniformDHError):
        shared_secret(new_keypair(), bad)
