"""Tags that name a registration: min's fixed HMAC and prefix's fresh obfuscated tag."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.common.elligator2 import new_keypair
from transports.conjure.wrapping import (
    NEED_MORE,
    PREFIXES,
    identify,
    min_tag,
    prefix_hello,
    prefix_hmac,
    prefix_tag,
    reveal_prefix_tag,
)

STATION = new_keypair()


@dataclass
class Reg:
    secret: bytes
    transport: str
    prefix_id: int = 0


def test_min_tag_is_conjures_hmac_with_its_typo():
    import hashlib
    import hmac
    assert min_tag(b"k" * 32) == hmac.new(b"k" * 32, b"MinTrasportHMACString",
                                          hashlib.sha256).digest()


def test_prefix_tags_reveal_the_hmac_and_are_fresh_every_time():
    secret = bytes(range(32))
    a, b = prefix_tag(secret, STATION.public), prefix_tag(secret, STATION.public)
    assert len(a) == len(b) == 64 and a != b and a[32:] != b[32:]
    assert reveal_prefix_tag(a, STATION.private) == prefix_hmac(secret)
    assert reveal_prefix_tag(a, new_keypair().private) != prefix_hmac(secret)


@pytest.mark.parametrize("prefix_id", sorted(PREFIXES))
def test_identify_finds_the_registration_behind_each_prefix(prefix_id):
    secret = bytes([prefix_id]) * 32
    regs = [Reg(b"\x01" * 32, "min"), Reg(b"\x02" * 32, "prefix", prefix_id),
            Reg(secret, "prefix", prefix_id)]
    hello = prefix_hello(secret, STATION.public, prefix_id) + b"payload"
    for cut in (1, len(PREFIXES[prefix_id][0]) + 10):
        assert identify(regs, hello[:cut], STATION.private) is NEED_MORE
    found = identify(regs, hello, STATION.private)
    assert found == (regs[2], len(hello) - len(b"payload"))


def test_a_wrong_prefix_or_key_names_no_registration():
    secret = b"s" * 32
    regs = [Reg(secret, "prefix", 1)]
    assert identify(regs, prefix_hello(secret, STATION.public, 9), STATION.private) is None
    other = new_keypair()
    assert identify(regs, prefix_hello(secret, other.public, 1), STATION.private) is None
    assert identify(regs, prefix_hello(secret, STATION.public, 1), None) is None


def test_min_needs_32_bytes_then_matches_or_not():
    secret = b"m" * 32
    regs = [Reg(secret, "min")]
    assert identify(regs, min_tag(secret)[:31]) is NEED_MORE
    assert identify(regs, min_tag(secret) + b"x") == (regs[0], 32)
    assert identify(regs, b"\x00" * 32) is None


@settings(max_examples=200, deadline=None)
@given(head=st.binary(max_size=200))
def test_random_bytes_never_match(head):
    regs = [Reg(b"a" * 32, "min"), Reg(b"b" * 32, "prefix", 1), Reg(b"c" * 32, "prefix", 0)]
    assert identify(regs, head, STATION.private) in (None, NEED_MORE)
