"""ScrambleSuit session tickets: issued after every handshake, redeemed once on the next
connection instead of a UniformDH exchange (docs/transports/scramblesuit.md §3;
RFC 5077 in spirit).

A ticket is 112 bytes, opaque to the client: ``IV (16) | AES-128-CBC(state) (64) |
HMAC-SHA256(IV | ciphertext) (32)``, the state being the issue time (4 bytes,
Unix seconds), ``"ScrambleSuitTicket"`` and the next session's master key (32)
plus 10 random bytes. Only the server's ticket keys open it. With the ticket
the server sends the master key itself, in a new-ticket frame (key | ticket,
144 bytes), so both ends derive the next session's keys without a key exchange.

Redemption: ``T | P (0-1388) | M | MAC(T | P | M | E)``, where M and the MAC are
HMAC-SHA256-128 under the client's sending MAC key of that next session. The
server accepts a ticket once (a second redemption is a replay, refused
silently), and only within its lifetime (7 days, configurable, on an injectable
clock).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from .framing import session_keys
from .handshake import (
    MAC_LENGTH,
    HandshakeError,
    epoch_hour,
    find_mark,
    mac128,
    verified_epoch,
)

TICKET_LENGTH = 112
KEY_LENGTH = 32
MAGIC = b"ScrambleSuitTicket"
LIFETIME_S = 7 * 24 * 3600
MAX_PAD = 1388  # TICKET_LENGTH + MAX_PAD + 2 MACs = the same 1532-byte cap as UniformDH
KEYS_FILE = "scramblesuit_ticket_keys.json"


@dataclass
class TicketIssuer:
    """The server's ticket keys and the tickets already redeemed."""

    aes_key: bytes = field(default_factory=lambda: os.urandom(16))
    hmac_key: bytes = field(default_factory=lambda: os.urandom(32))
    clock: Callable[[], float] = time.time
    lifetime_s: float = LIFETIME_S
    _redeemed: dict[bytes, float] = field(default_factory=dict)  # tag -> expiry

    @classmethod
    def load_or_create(cls, state_dir: Path | str, *, clock: Callable[[], float] = time.time,
                       lifetime_s: float = LIFETIME_S) -> TicketIssuer:
        """Keys kept in the state directory (mode 0600), so tickets outlive restarts."""
        path = Path(state_dir) / KEYS_FILE
        try:
            doc = json.loads(path.read_text())
            return cls(bytes.fromhex(doc["aes-key"]), bytes.fromhex(doc["hmac-key"]),
                       clock=clock, lifetime_s=lifetime_s)
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"unreadable ticket keys in {path}: {exc}") from None
        issuer = cls(clock=clock, lifetime_s=lifetime_s)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"aes-key": issuer.aes_key.hex(), "hmac-key": issuer.hmac_key.hex()}, f)
        return issuer

    def issue(self, master: bytes) -> bytes:
        if len(master) != KEY_LENGTH:
            raise ValueError("a ticket carries a 32-byte master key")
        state = int(self.clock()).to_bytes(4, "big") + MAGIC + master + secrets.token_bytes(10)
        iv = os.urandom(16)
        enc = Cipher(algorithms.AES(self.aes_key), modes.CBC(iv)).encryptor()
        body = iv + enc.update(state) + enc.finalize()
        return body + hmac.new(self.hmac_key, body, "sha256").digest()

    def new_ticket(self) -> tuple[bytes, bytes]:
        """(master key, ticket) for the client's next connection."""
        master = os.urandom(KEY_LENGTH)
        return master, self.issue(master)

    def open(self, ticket: bytes) -> bytes | None:
        """The master key inside a valid, unexpired ticket (not yet marking it used)."""
        if len(ticket) < TICKET_LENGTH:
            return None
        body, tag = ticket[:80], ticket[80:TICKET_LENGTH]
        if not hmac.compare_digest(hmac.new(self.hmac_key, body, "sha256").digest(), tag):
            return None
        dec = Cipher(algorithms.AES(self.aes_key), modes.CBC(body[:16])).decryptor()
        state = dec.update(body[16:]) + dec.finalize()
        if state[4:22] != MAGIC:
            return None
        issued = int.from_bytes(state[:4], "big")
        now = self.clock()
        if not issued - 60 <= now < issued + self.lifetime_s:
            return None
        return state[22:54]

    def redeem_once(self, ticket: bytes) -> bool:
        """Record a redemption; False if this ticket was redeemed before."""
        now = self.clock()
        self._redeemed = {t: e for t, e in self._redeemed.items() if e > now}
        tag = ticket[80:TICKET_LENGTH]
        if tag in self._redeemed:
            return False
        self._redeemed[tag] = now + self.lifetime_s
        return True


def ticket_handshake(ticket: bytes, master: bytes, now: float,
                     pad_len: int | None = None) -> bytes:
    """The client's redemption: ``T | P | M | MAC(T | P | M | E)``."""
    key = session_keys(master)[0].mac_key
    pad = secrets.token_bytes(secrets.randbelow(MAX_PAD + 1) if pad_len is None else pad_len)
    mark = mac128(key, ticket)
    epoch = str(epoch_hour(now)).encode()
    return ticket + pad + mark + mac128(key, ticket, pad, mark, epoch)


@dataclass(frozen=True)
class TicketHello:
    master: bytes
    consumed: int


def parse_ticket_hello(buf: bytes, issuer: TicketIssuer, now: float) -> TicketHello | None:
    """A verified redemption, or None (incomplete, or not a ticket at all: then the
    caller tries UniformDH). Raises :class:`HandshakeError` for a replay or a bad MAC."""
    master = issuer.open(buf[:TICKET_LENGTH])
    if master is None:
        return None
    key = session_keys(master)[0].mac_key
    pos = find_mark(buf, mac128(key, buf[:TICKET_LENGTH]), TICKET_LENGTH)
    if pos is None:
        return None
    mac_rx = buf[pos + MAC_LENGTH:pos + 2 * MAC_LENGTH]
    if verified_epoch(key, buf[:pos + MAC_LENGTH], mac_rx, now) is None:
        raise HandshakeError("ticket MAC does not verify")
    if not issuer.redeem_once(buf[:TICKET_LENGTH]):
        raise HandshakeError("replayed ticket")
    return TicketHello(master, pos + 2 * MAC_LENGTH)
