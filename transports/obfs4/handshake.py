"""The obfs4 handshake messages: building, finding and checking them.

Wire format (obfs4proxy ``transports/obfs4/handshake_ntor.go``)::

    client -> server   X' | P_C | M_C | MAC_C
    server -> client   Y' | AUTH | P_S | M_S | MAC_S   (then the inline PRNG-seed frame)

* ``X'``/``Y'`` are Elligator2 representatives of ephemeral keys, ``AUTH`` is ntor's.
* ``M = HMAC-SHA256(B | NODEID, X' or Y')[:16]`` marks where the padding ends, so
  a receiver can find the end of a random-length message without a length field.
* ``MAC = HMAC-SHA256(B | NODEID, everything before it | E)[:16]`` where ``E`` is
  the Unix time in hours as an ASCII decimal.  The server accepts the client's
  hour ±1 and answers with the hour that matched.

Only holders of the bridge cert (``NODEID | B``) can compute a mark, so without
one the server never says anything: the probe-resistance policy (silence, read
and discard, delayed close) belongs to the connection layer; here a failure is
just a :class:`HandshakeError` with a reason for logs.

The server side is a pure function over a *set* of server keys so that one
listener can accept obfs4 for several identities (Conjure's per-registration
keys); obfs4proxy's single bridge is the one-key case.

Lengths come from obfs4proxy's code, not the spec (which says a client pads at
least 85 and a server up to 8096): both first flights are at most
``MAX_HANDSHAKE_LENGTH``, and the server's counts the 45-byte inline seed frame.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass

from transports.common import ntor
from transports.common.elligator2 import (
    REPRESENTATIVE_LENGTH,
    Keypair,
    new_keypair,
    representative_to_public,
)
from transports.common.replayfilter import ReplayFilter

MARK_LENGTH = 16
MAC_LENGTH = 16
MAX_HANDSHAKE_LENGTH = 8192

# The PRNG-seed frame the server sends right after its response, in the same
# write: 2 (length) + 16 (Poly1305 tag) + 3 (packet header) + 24 (seed).
INLINE_SEED_FRAME_LENGTH = 2 + 16 + 3 + 24

CLIENT_MIN_HANDSHAKE_LENGTH = REPRESENTATIVE_LENGTH + MARK_LENGTH + MAC_LENGTH  # 64
SERVER_MIN_HANDSHAKE_LENGTH = (
    REPRESENTATIVE_LENGTH + ntor.AUTH_LENGTH + MARK_LENGTH + MAC_LENGTH
)  # 96

# A minimal request is as long as a minimal server first flight (141 bytes),
# so sizes alone do not tell the two directions apart.
CLIENT_MIN_PAD_LENGTH = (
    SERVER_MIN_HANDSHAKE_LENGTH + INLINE_SEED_FRAME_LENGTH - CLIENT_MIN_HANDSHAKE_LENGTH
)  # 77
CLIENT_MAX_PAD_LENGTH = MAX_HANDSHAKE_LENGTH - CLIENT_MIN_HANDSHAKE_LENGTH  # 8128

# The padding budget leaves exactly INLINE_SEED_FRAME_LENGTH bytes for the seed
# frame, so that response + seed frame <= MAX_HANDSHAKE_LENGTH (8192).
SERVER_MIN_PAD_LENGTH = 0
SERVER_MAX_PAD_LENGTH = MAX_HANDSHAKE_LENGTH - (
    SERVER_MIN_HANDSHAKE_LENGTH + INLINE_SEED_FRAME_LENGTH
)  # 8051

_TAIL = MARK_LENGTH + MAC_LENGTH


class HandshakeError(Exception):
    """The peer's handshake is invalid; the message says why (for logs, never the wire)."""


def _hmac128(key: bytes, *parts: bytes) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.digest()[:16]


def epoch_hour(now: float | None = None) -> int:
    """Hours since the Unix epoch, the ``E`` bound into both MACs."""
    return math.floor(time.time() if now is None else now) // 3600


def _random_in(low: int, high: int) -> int:
    """Uniform in [low, high], inclusive (csrand.IntRange)."""
    return low + secrets.randbelow(high - low + 1)


def _check_pad(pad_len: int | None, low: int, high: int) -> int:
    if pad_len is None:
        return _random_in(low, high)
    if not low <= pad_len <= high:
        raise ValueError(f"pad length {pad_len} outside [{low}, {high}]")
    return pad_len


class ClientHandshake:
    """One client handshake: build the request, then recognise and verify the response."""

    def __init__(self, node_id: bytes, id_public: bytes, session_keypair: Keypair) -> None:
        if len(node_id) != ntor.NODE_ID_LENGTH or len(id_public) != ntor.PUBLIC_KEY_LENGTH:
            raise ValueError("node_id must be 20 bytes and id_public 32 bytes")
        if session_keypair.representative is None:
            raise ValueError("the session keypair needs an Elligator2 representative")
        self.node_id = node_id
        self.id_public = id_public
        self.keypair = session_keypair
        self._mac_key = id_public + node_id
        self._epoch: bytes | None = None

    def generate(self, pad_len: int | None = None, now: float | None = None) -> bytes:
        """The request ``X' | P_C | M_C | MAC_C``, to be sent in one write.

        ``pad_len`` defaults to uniform in [77, 8128]; ``now`` (Unix time) fixes
        the epoch hour, which the response's MAC must then use too.
        """
        pad_len = _check_pad(pad_len, CLIENT_MIN_PAD_LENGTH, CLIENT_MAX_PAD_LENGTH)
        representative = self.keypair.representative
        assert representative is not None
        self._epoch = str(epoch_hour(now)).encode()
        body = representative + secrets.token_bytes(pad_len) + _hmac128(
            self._mac_key, representative
        )
        return body + _hmac128(self._mac_key, body, self._epoch)

    def parse_server_response(self, buf: bytes) -> tuple[int, bytes] | None:
        """Look for a complete, authentic response at the start of ``buf``.

        ``buf`` is everything received so far.  Returns ``(consumed, key_seed)``
        once the response is complete (bytes after ``consumed`` are already
        frames), None if more data is needed, and raises :class:`HandshakeError`
        if 8192 bytes hold no mark, or the MAC or ntor AUTH is wrong.
        """
        if self._epoch is None:
            raise RuntimeError("generate() must be called before parsing a response")
        if len(buf) < SERVER_MIN_HANDSHAKE_LENGTH:
            return None
        representative = bytes(buf[:REPRESENTATIVE_LENGTH])
        auth = bytes(buf[REPRESENTATIVE_LENGTH : REPRESENTATIVE_LENGTH + ntor.AUTH_LENGTH])
        mark = _hmac128(self._mac_key, representative)

        # The server may send frames right behind its MAC, so search for the mark
        # (its first occurrence, like obfs4proxy) rather than expect it at the tail.
        start = REPRESENTATIVE_LENGTH + ntor.AUTH_LENGTH + SERVER_MIN_PAD_LENGTH
        window = bytes(buf[:MAX_HANDSHAKE_LENGTH])
        pos = window.find(mark, start)
        if pos == -1 or pos + _TAIL > len(window):
            if len(buf) >= MAX_HANDSHAKE_LENGTH:
                raise HandshakeError("no M_S in the first 8192 bytes of the response")
            return None

        mac_end = pos + _TAIL
        expected = _hmac128(self._mac_key, window[: pos + MARK_LENGTH], self._epoch)
        if not hmac.compare_digest(expected, window[pos + MARK_LENGTH : mac_end]):
            raise HandshakeError("MAC_S mismatch")

        server_public = representative_to_public(representative)
        ok, key_seed, derived_auth = ntor.client_handshake(
            self.keypair, server_public, self.id_public, self.node_id
        )
        if not ok:
            raise HandshakeError("ntor failed: all-zero shared secret")
        if not hmac.compare_digest(derived_auth, auth):
            raise HandshakeError("ntor AUTH mismatch (wrong bridge key or node ID?)")
        return mac_end, key_seed


@dataclass(frozen=True)
class ServerKey:
    """One identity a server answers for: the bridge cert is ``node_id | identity.public``."""

    node_id: bytes
    identity: Keypair

    def __post_init__(self) -> None:
        if len(self.node_id) != ntor.NODE_ID_LENGTH:
            raise ValueError("node_id must be 20 bytes")
        if len(self.identity.public) != ntor.PUBLIC_KEY_LENGTH:
            raise ValueError("identity public key must be 32 bytes")

    @property
    def mac_key(self) -> bytes:
        """The HMAC key of marks and MACs: ``B | NODEID`` (the cert in reverse order)."""
        return self.identity.public + self.node_id


@dataclass(frozen=True)
class ClientHello:
    """A client request that passed every check, and what the response needs from it."""

    key: ServerKey
    representative: bytes
    client_public: bytes
    epoch_hour: int
    consumed: int
    mac: bytes


def parse_client_hello(
    buf: bytes, keys: Sequence[ServerKey], now: float, replay: ReplayFilter | None
) -> ClientHello | None:
    """Recognise a client request addressed to any of ``keys``.

    ``buf`` is everything read so far.  As in obfs4proxy, ``M_C | MAC_C`` must be
    the last 32 bytes (a client cannot send anything after its request before it
    has the server's answer), so a request followed by extra bytes in the same
    read looks incomplete and, if nothing else comes, times out.

    Returns None if more data is needed.  Raises :class:`HandshakeError` if 8192
    bytes arrived without a mark, if a mark matches but MAC_C fails for the
    epoch hours ``now``-1h, ``now`` and ``now``+1h, or if ``replay`` has seen the
    MAC before (the MAC is recorded in ``replay`` on success).  ``now`` is Unix
    time; ``replay`` may be None only where replays are harmless (tests).
    """
    window = bytes(buf[:MAX_HANDSHAKE_LENGTH])
    if len(window) < REPRESENTATIVE_LENGTH + CLIENT_MIN_PAD_LENGTH + _TAIL:
        return None
    representative = window[:REPRESENTATIVE_LENGTH]
    pos = len(window) - _TAIL
    mark_rx = window[pos : pos + MARK_LENGTH]
    mac_rx = window[pos + MARK_LENGTH :]

    candidates = [
        key
        for key in keys
        if hmac.compare_digest(_hmac128(key.mac_key, representative), mark_rx)
    ]
    if not candidates:
        if len(buf) >= MAX_HANDSHAKE_LENGTH:
            raise HandshakeError("no M_C in the first 8192 bytes")
        return None

    hour = epoch_hour(now)
    match: tuple[ServerKey, int] | None = None
    for key in candidates:
        # All three hours are always computed, to keep timing uniform.
        for candidate_hour in (hour, hour - 1, hour + 1):
            expected = _hmac128(key.mac_key, window[: pos + MARK_LENGTH], b"%d" % candidate_hour)
            if hmac.compare_digest(expected, mac_rx) and match is None:
                match = (key, candidate_hour)
    if match is None:
        raise HandshakeError("MAC_C invalid for epoch hours E-1, E, E+1")
    if replay is not None and replay.test_and_set(mac_rx):
        raise HandshakeError("replayed MAC_C")
    if len(buf) != pos + _TAIL:
        raise HandshakeError("data after MAC_C beyond 8192 bytes")

    key, matched_hour = match
    return ClientHello(
        key=key,
        representative=representative,
        client_public=representative_to_public(representative),
        epoch_hour=matched_hour,
        consumed=pos + _TAIL,
        mac=mac_rx,
    )


def server_response(
    hello: ClientHello, session_keypair: Keypair | None = None, pad_len: int | None = None
) -> tuple[bytes, bytes]:
    """Build ``Y' | AUTH | P_S | M_S | MAC_S`` and return it with the ntor KEY_SEED.

    ``pad_len`` defaults to uniform in [0, 8051], which leaves room for the
    45-byte inline PRNG-seed frame that the framing layer must append in the
    same write (response + seed frame <= 8192).  Raises :class:`HandshakeError`
    if ntor fails (the client sent a low-order key, e.g. representative 0).
    """
    if session_keypair is None:
        session_keypair = new_keypair(elligator=True)
    if session_keypair.representative is None:
        raise ValueError("the session keypair needs an Elligator2 representative")
    pad_len = _check_pad(pad_len, SERVER_MIN_PAD_LENGTH, SERVER_MAX_PAD_LENGTH)

    key = hello.key
    ok, key_seed, auth = ntor.server_handshake(
        hello.client_public, session_keypair, key.identity, key.node_id
    )
    if not ok:
        raise HandshakeError("ntor failed: all-zero shared secret")

    representative = session_keypair.representative
    body = (
        representative
        + auth
        + secrets.token_bytes(pad_len)
        + _hmac128(key.mac_key, representative)
    )
    return body + _hmac128(key.mac_key, body, b"%d" % hello.epoch_hour), key_seed
