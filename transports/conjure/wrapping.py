"""How a connection to a phantom says which registration it belongs to.

``min`` (conjure ``pkg/transports/wrapping/min``): the client's first 32 bytes
are HMAC-SHA256(key = shared secret, message = ``"MinTrasportHMACString"``, the
typo included), the same on every reconnect. The station compares them with the
tags of the registrations for this (client, phantom, port).

``prefix`` (``wrapping/prefix``): protocol-looking bytes (``GET / HTTP/1.1\r\n``,
a TLS record header, an SSH banner...), then a 64-byte tag that is fresh on
every connection: the Elligator2 representative of an ephemeral X25519 key
(top two bits random), then HMAC-SHA256(secret, ``"PrefixTransportHMACString"``)
under AES-128-CTR with key and IV from SHA-256 of X25519(ephemeral, station
key) (bytes 0-16 and 16-32; conjure ``CTRObfuscator``). Only the station's
private key reveals the HMAC, which names the registration; the prefix must be
the one the registration chose.

``obfs4`` (``wrapping/obfs4``): an ordinary obfs4 handshake whose server
identity (node id and key) each registration derives from its secret; the
station recognises the client's mark under the keys of the registrations for
this phantom, then obfs4's own server takes the connection over.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import time
from collections.abc import Sequence
from typing import Final, Protocol, TypeVar

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from nacl.bindings import crypto_scalarmult

from transports.common.elligator2 import new_keypair, representative_to_public
from transports.obfs4.handshake import (
    MAX_HANDSHAKE_LENGTH,
    HandshakeError,
    ServerKey,
    parse_client_hello,
)

MIN_TAG_LENGTH = 32
MIN_HMAC_STRING = b"MinTrasportHMACString"
PREFIX_TAG_LENGTH = 64
PREFIX_HMAC_STRING = b"PrefixTransportHMACString"

# Prefix id -> (bytes before the tag, the default phantom port) (conjure defaultPrefixes).
PREFIXES: dict[int, tuple[bytes, int]] = {
    0: (b"", 443),                                # Min
    1: (b"GET / HTTP/1.1\r\n", 80),             # GetLong
    2: (b"POST / HTTP/1.1\r\n", 80),            # PostLong
    3: (b"HTTP/1.1 200\r\n", 80),               # HTTPResp
    4: (b"\x16\x03\x03\x40\x00\x01", 443),      # TLSClientHello
    5: (b"\x16\x03\x03\x40\x00\x02\r\n", 443),  # TLSServerHello
    6: (b"\x15\x03\x01\x00\x02", 443),          # TLSAlertWarning
    7: (b"\x15\x03\x02\x00\x02", 443),          # TLSAlertFatal
    8: (b"\x05\xdc\x5f\xe0\x01\x20", 53),        # DNSOverTCP
    9: (b"SSH-2.0-OpenSSH_8.9p1", 22),            # OpenSSH2
}


def min_tag(secret: bytes) -> bytes:
    return hmac.new(secret, MIN_HMAC_STRING, hashlib.sha256).digest()


def prefix_hmac(secret: bytes) -> bytes:
    return hmac.new(secret, PREFIX_HMAC_STRING, hashlib.sha256).digest()


def _ctr(shared: bytes, data: bytes) -> bytes:
    h = hashlib.sha256(shared).digest()
    cipher = Cipher(algorithms.AES(h[:16]), modes.CTR(h[16:32])).encryptor()
    return cipher.update(data) + cipher.finalize()


def prefix_tag(secret: bytes, station_public: bytes) -> bytes:
    """A fresh 64-byte obfuscated tag for ``secret`` (client side)."""
    eph = new_keypair(elligator=True)
    assert eph.representative is not None
    shared = crypto_scalarmult(eph.private, station_public)
    return eph.representative + _ctr(shared, prefix_hmac(secret))


def reveal_prefix_tag(tag: bytes, station_private: bytes) -> bytes | None:
    """The HMAC inside a tag (station side); None if the key exchange fails."""
    try:
        shared = crypto_scalarmult(station_private, representative_to_public(tag[:32]))
    except Exception:  # noqa: BLE001 - a low-order point: no registration
        return None
    return _ctr(shared, tag[32:PREFIX_TAG_LENGTH])


def prefix_hello(secret: bytes, station_public: bytes, prefix_id: int) -> bytes:
    """What a prefix client sends first: the prefix, then its tag."""
    return PREFIXES[prefix_id][0] + prefix_tag(secret, station_public)


class Candidate(Protocol):
    secret: bytes
    transport: str
    prefix_id: int
    obfs4_key: ServerKey | None


C = TypeVar("C", bound=Candidate)


class NeedMore(enum.Enum):
    """:func:`identify`'s third answer, beside a match and None: an enum of one
    member, so a type checker tells it from the other two."""

    NEED_MORE = "need more"


NEED_MORE: Final = NeedMore.NEED_MORE


def identify(candidates: Sequence[C], head: bytes,
             station_private: bytes | None = None) -> tuple[C, int] | NeedMore | None:
    """The registration ``head`` opens with and how many bytes its prefix and tag
    took; None when no registration can match; :data:`NEED_MORE` while too few
    bytes arrived to tell."""
    waiting = False
    mins = [c for c in candidates if c.transport == "min"]
    if mins:
        if len(head) < MIN_TAG_LENGTH:
            waiting = True
        else:
            for c in mins:
                if hmac.compare_digest(min_tag(c.secret), head[:MIN_TAG_LENGTH]):
                    return c, MIN_TAG_LENGTH
    prefixed = [c for c in candidates if c.transport == "prefix"]
    if prefixed and station_private is not None:
        revealed: dict[int, bytes | None] = {}
        for c in prefixed:
            static, _ = PREFIXES.get(c.prefix_id, (None, 0))
            if static is None or not head.startswith(static[:len(head)]):
                continue
            end = len(static) + PREFIX_TAG_LENGTH
            if len(head) < end:
                waiting = True
                continue
            if c.prefix_id not in revealed:
                revealed[c.prefix_id] = reveal_prefix_tag(head[len(static):end], station_private)
            found = revealed[c.prefix_id]
            if found is not None and hmac.compare_digest(prefix_hmac(c.secret), found):
                return c, end
    tunnels = [c for c in candidates if c.transport == "obfs4"]
    if tunnels:
        by_key = {id(c.obfs4_key): c for c in tunnels if c.obfs4_key is not None}
        keys = [c.obfs4_key for c in tunnels if c.obfs4_key is not None]
        try:
            hello = parse_client_hello(head, keys, time.time(), None)
        except HandshakeError:
            hello = None
        else:
            if hello is None and len(head) < MAX_HANDSHAKE_LENGTH:
                waiting = True
        if hello is not None:
            # obfs4's own server answers the handshake: nothing is consumed here.
            return by_key[id(hello.key)], 0
    return NEED_MORE if waiting else None
