"""Phantom selection against the conjure repository's own test vector, and the
properties the station relies on."""

from __future__ import annotations

import ipaddress
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.conjure.phantom import (
    CONJURE_SALT,
    HkdfStream,
    PhantomConfig,
    PhantomError,
    SubnetGroup,
    derive_keys,
    go_rand_int,
    select_phantom,
    select_port,
)

# conjure pkg/phantoms/phantom_selector_test.go, TestPhantomsSeededSelectionHkdf.
REPO_SEED = bytes.fromhex("5a87133b68ea3468988a21659a12ed2ece07345c8c1a5b08459ffdea4218d12f")
REPO_CONFIG = PhantomConfig([
    SubnetGroup.parse(9, ["192.122.190.0/24", "10.0.0.0/31", "2001:48a8:687f:1::/64"]),
    SubnetGroup.parse(1, ["141.219.0.0/16", "35.8.0.0/16"]),
])


def test_the_repositorys_seeded_hkdf_selection_vector():
    phantom = select_phantom(REPO_SEED, REPO_CONFIG, v6=False, client_lib_version=2)
    assert str(phantom.address) == "192.122.190.164"


def test_v6_selection_stays_in_the_chosen_groups_v6_subnets():
    """TestPhantomsV6Hkdf asks only for an IPv6 address; docs/transports/conjure.md §3.4 records
    this value from the same algorithm (not a repository vector)."""
    phantom = select_phantom(REPO_SEED, REPO_CONFIG, v6=True, client_lib_version=2)
    assert phantom.address.version == 6
    assert phantom.address in ipaddress.ip_network("2001:48a8:687f:1::/64")
    assert str(phantom.address) == "2001:48a8:687f:1:5da6:63e0:48a4:b3e"


def test_random_port_above_the_transport_floor():
    cfg = PhantomConfig([SubnetGroup.parse(1, ["198.18.200.0/24"], randomize_dst_port=True)])
    phantom = select_phantom(REPO_SEED, cfg, v6=False)
    # the port docs/transports/conjure.md §3.4 gives
    assert select_port(REPO_SEED, "min", phantom, randomize=True) == 45649
    assert select_port(REPO_SEED, "min", phantom, randomize=False) == 443
    fixed = PhantomConfig([SubnetGroup.parse(1, ["198.18.200.0/24"])])
    assert select_port(REPO_SEED, "obfs4", select_phantom(REPO_SEED, fixed, False), True) == 443


def test_port_rule_is_conjures_443_unless_the_group_lets_the_transport_choose():
    """conjure v0.7.10 ``getPhantomDstPort``, gotapdance v1.7.10 ``UnidirectionalRegData``:
    seen against Conjure's client, which dialled 443 for an SSH prefix (§9)."""
    free = select_phantom(REPO_SEED, PhantomConfig(
        [SubnetGroup.parse(1, ["198.18.200.0/24"], randomize_dst_port=True)]), v6=False)
    fixed = select_phantom(REPO_SEED, PhantomConfig(
        [SubnetGroup.parse(1, ["198.18.200.0/24"])]), v6=False)
    assert select_port(REPO_SEED, "prefix", fixed, False, default_port=22) == 443
    assert select_port(REPO_SEED, "prefix", fixed, True, default_port=22) == 443
    assert select_port(REPO_SEED, "prefix", free, False, default_port=22) == 22
    assert 1024 <= select_port(REPO_SEED, "prefix", free, True, default_port=22) < 65535
    # client library 2 predates ports other than 443, whatever the group allows
    assert select_port(REPO_SEED, "prefix", free, False, 22, client_lib_version=2) == 443
    assert select_port(REPO_SEED, "min", free, True, client_lib_version=2) == 443
    assert select_port(REPO_SEED, "min", free, True, client_lib_version=3) == 45649


class Bytes:
    """A stream that hands out fixed bytes (the draws below are worked by hand)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int) -> bytes:
        self.pos += n
        return self.data[self.pos - n:self.pos]


def test_go_rand_int_on_known_bytes():
    # max 300: 299 has 9 bits -> 2 bytes, top byte masked to 1 bit. ff ff -> 511, rejected;
    # 01 2b -> 299, kept.
    stream = Bytes(bytes.fromhex("ffff012b"))
    assert go_rand_int(stream, 300) == 299 and stream.pos == 4
    # max 256: 255 has 8 bits -> 1 byte, no masking, never rejected.
    assert go_rand_int(Bytes(b"\xff"), 256) == 255
    # max 257: 256 has 9 bits; 01 00 -> 256 kept, 01 01 -> 257 rejected.
    assert go_rand_int(Bytes(bytes.fromhex("ff01" "0100")), 257) == 256


def test_go_rand_int_masks_and_rejects_like_go():
    stream = HkdfStream(b"k", None, b"x")
    raw = HkdfStream(b"k", None, b"x").read(64)
    # max 300: 2 bytes, top byte masked to 1 bit (299 needs 9 bits).
    first = int.from_bytes(bytes([raw[0] & 1, raw[1]]), "big")
    got = go_rand_int(stream, 300)
    if first < 300:
        assert got == first and stream.pos == 2
    else:
        assert stream.pos >= 4
    assert go_rand_int(HkdfStream(b"k", None, b"x"), 1) == 0


def test_hkdf_stream_reads_continue_the_same_output():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    whole = HKDF(hashes.SHA256(), 300, CONJURE_SALT, b"").derive(b"secret")
    s = HkdfStream(b"secret", CONJURE_SALT, b"")
    assert s.read(16) + s.read(100) + s.read(184) == whole


def test_seed_is_the_first_16_bytes_for_v4_and_bytes_104_to_120_before():
    secret = bytes(range(32))
    stream = HkdfStream(secret, CONJURE_SALT, b"").read(120)
    assert derive_keys(secret, 4).seed == stream[:16]
    assert derive_keys(secret, 3).seed == stream[104:120]
    keys = derive_keys(secret, 4)
    assert keys.transport_stream.read(8) == stream[16:24]  # transport keys follow the seed


@settings(max_examples=200, deadline=None)
@given(seed=st.binary(min_size=16, max_size=32), v6=st.booleans())
def test_every_phantom_lies_in_a_configured_subnet_of_its_family(seed, v6):
    cfg = PhantomConfig([
        SubnetGroup.parse(3, ["198.18.200.0/24", "198.18.201.0/30", "2001:db8:cafe::/64"]),
        SubnetGroup.parse(1, ["198.18.210.0/28", "2001:db8:beef::/120"]),
    ])
    p = select_phantom(seed, cfg, v6)
    assert p.address.version == (6 if v6 else 4)
    assert p.address in p.subnet and any(p.subnet == n for g in cfg.groups for n in g.subnets)
    assert select_phantom(seed, cfg, v6) == p  # deterministic: the station agrees


def test_weights_shape_the_choice_of_group():
    cfg = PhantomConfig([SubnetGroup.parse(9, ["198.18.200.0/24"]),
                         SubnetGroup.parse(1, ["198.18.210.0/24"])])
    hits = sum(select_phantom(os.urandom(16), cfg, False).address in
               ipaddress.ip_network("198.18.200.0/24") for _ in range(2000))
    assert 1700 < hits < 1900  # 90 % expected; binomial sd ~ 13


@pytest.mark.parametrize("make, msg", [
    (lambda: select_phantom(REPO_SEED, REPO_CONFIG, False, client_lib_version=1),
     "version 1"),
    (lambda: SubnetGroup.parse(1, ["not a net"]), "bad phantom subnet"),
    (lambda: SubnetGroup.parse(1, []), "at least one subnet"),
    (lambda: select_phantom(REPO_SEED, PhantomConfig([SubnetGroup.parse(1, ["10.0.0.0/8"])]),
                            v6=True), "no valid addresses"),
    (lambda: PhantomConfig([]).choose_group(REPO_SEED), "no weighted"),
])
def test_errors_are_clear(make, msg):
    with pytest.raises(PhantomError, match=msg):
        make()
