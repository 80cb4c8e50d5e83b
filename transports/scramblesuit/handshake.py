"""ScrambleSuit's UniformDH handshake (docs/transports/scramblesuit.md §2; obfs4proxy's
``transports/scramblesuit/handshake_uniformdh.go`` for the client's exact bytes).

Both sides know the 20-byte shared secret k_B from the bridge line
(``password=``). With HMAC-SHA256-128 under k_B ("MAC" below, 16 bytes):

* client: ``X | P_C | M_C | MAC(X | P_C | M_C | E)`` where X is a UniformDH
  public key (192 bytes), P_C 0-1308 random bytes, ``M_C = MAC(X)`` and E the
  client's epoch hour as decimal ASCII; at most 1532 bytes;
* server: ``Y | P_S | M_S | MAC(Y | P_S | M_S | E)`` with the client's E;
* the session's master key is SHA-256 of the UniformDH shared secret.

Each side finds the other's mark by searching the bytes after the public key
(the pads hide where it is), then checks the MAC. Our server accepts E for
the hours before, at and after its own (clock skew, as obfs4 does), answers
nothing to a handshake it cannot verify, and refuses a replayed one (its MAC is
remembered).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import uniformdh

MAC_LENGTH = 16
MIN_PAD, MAX_PAD = 0, 1308
MAX_HANDSHAKE = 1532
MIN_HANDSHAKE = uniformdh.SIZE + 2 * MAC_LENGTH
SECRET_LENGTH = 20


class HandshakeError(ValueError):
    """The peer's handshake is invalid (bad MAC, no mark in the maximum length, replay)."""


def mac128(key: bytes, *parts: bytes) -> bytes:
    h = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        h.update(part)
    return h.digest()[:MAC_LENGTH]


def epoch_hour(now: float) -> int:
    return int(now) // 3600


def find_mark(buf: bytes, mark: bytes, start: int = uniformdh.SIZE) -> int | None:
    """Where ``mark`` (followed by a full MAC) starts after the first ``start`` bytes
    (the public key or the ticket); None: not yet. Raises when a maximum-length
    message holds no mark. UniformDH and ticket handshakes share the 1532-byte cap."""
    end = min(len(buf), MAX_HANDSHAKE - MAC_LENGTH)
    pos = buf.find(mark, start, end)
    if pos == -1:
        if len(buf) >= MAX_HANDSHAKE:
            raise HandshakeError("no mark in the maximum handshake length")
        return None
    if len(buf) < pos + 2 * MAC_LENGTH:
        return None
    return pos


def verified_epoch(key: bytes, signed: bytes, mac_rx: bytes, now: float) -> bytes | None:
    """The epoch hour (ASCII) under which ``mac_rx`` signs ``signed``: this hour, the
    last or the next (all three are computed, for uniform timing); None if none."""
    hour = epoch_hour(now)
    found = None
    for candidate in (hour, hour - 1, hour + 1):
        e = str(candidate).encode()
        if hmac.compare_digest(mac128(key, signed, e), mac_rx) and found is None:
            found = e
    return found


def _pad(length: int | None) -> bytes:
    n = secrets.randbelow(MAX_PAD - MIN_PAD + 1) + MIN_PAD if length is None else length
    return secrets.token_bytes(n)


@dataclass
class ClientHandshake:
    """The client side: :meth:`generate`, then :meth:`parse_server` on what arrives."""

    k_b: bytes
    keypair: uniformdh.Keypair = field(default_factory=uniformdh.new_keypair)
    pad_len: int | None = None
    now: Callable[[], float] = time.time
    epoch: bytes = b""

    def generate(self) -> bytes:
        x = self.keypair.public
        mark = mac128(self.k_b, x)
        pad = _pad(self.pad_len)
        self.epoch = str(epoch_hour(self.now())).encode()
        return x + pad + mark + mac128(self.k_b, x, pad, mark, self.epoch)

    def parse_server(self, buf: bytes) -> tuple[int, bytes] | None:
        """(bytes the response took, master key), or None while incomplete."""
        if len(buf) < MIN_HANDSHAKE:
            return None
        y = buf[:uniformdh.SIZE]
        pos = find_mark(buf, mac128(self.k_b, y))
        if pos is None:
            return None
        expected = mac128(self.k_b, buf[:pos + MAC_LENGTH], self.epoch)
        if not hmac.compare_digest(expected, buf[pos + MAC_LENGTH:pos + 2 * MAC_LENGTH]):
            raise HandshakeError("server MAC does not verify")
        secret = uniformdh.shared_secret(self.keypair, y)
        return pos + 2 * MAC_LENGTH, hashlib.sha256(secret).digest()


@dataclass(frozen=True)
class ClientHello:
    public: bytes  # X as sent
    epoch: bytes  # the client's E, echoed in the server's MAC
    mac: bytes  # MAC_C: what the replay filter remembers
    consumed: int


def parse_client_hello(buf: bytes, k_b: bytes, now: float,
                       seen: Callable[[bytes], bool] | None = None) -> ClientHello | None:
    """A verified client handshake, or None while incomplete. ``seen(mac)`` says
    whether a MAC was accepted before (and records it); a repeat is refused."""
    if len(buf) < MIN_HANDSHAKE:
        return None
    x = buf[:uniformdh.SIZE]
    pos = find_mark(buf, mac128(k_b, x))
    if pos is None:
        return None
    mac_rx = buf[pos + MAC_LENGTH:pos + 2 * MAC_LENGTH]
    epoch = verified_epoch(k_b, buf[:pos + MAC_LENGTH], mac_rx, now)
    if epoch is None:
        raise HandshakeError("client MAC does not verify for this hour or the next or last")
    if seen is not None and seen(mac_rx):
        raise HandshakeError("replayed handshake")
    return ClientHello(x, epoch, mac_rx, pos + 2 * MAC_LENGTH)


def server_response(k_b: bytes, hello: ClientHello,
                    keypair: uniformdh.Keypair | None = None,
                    pad_len: int | None = None) -> tuple[bytes, bytes]:
    """(the server's handshake bytes, the session's master key)."""
    keypair = keypair or uniformdh.new_keypair()
    y = keypair.public
    pad = _pad(pad_len)
    mark = mac128(k_b, y)
    response = y + pad + mark + mac128(k_b, y, pad, mark, hello.epoch)
    master = hashlib.sha256(uniformdh.shared_secret(keypair, hello.public)).digest()
    return response, master
