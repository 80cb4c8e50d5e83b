"""WireGuard's handshake on the wire: four message types of fixed layout, and the
rule a censor uses to spot them (docs/censors/vpn.md §3).

Why this exists: WireGuard (Donenfeld, NDSS 2017, §5.4) makes no effort to hide.
Every message starts with a one-byte type and three reserved zero bytes, and the
handshake messages have fixed sizes. Russia's TSPU was reported blocking WireGuard
by its handshake in 2023–2024 (docs/censors/vpn.md §3). This module names those
facts so that the censor's rule, the tests and the fuzzer share them.

Sizes (UDP payload bytes; whitepaper §5.4.2–§5.4.7):

* handshake initiation, type 1: 148 (4 type+reserved, 4 sender index, 32 ephemeral,
  48 encrypted static, 28 encrypted timestamp, 16 mac1, 16 mac2);
* handshake response, type 2: 92 (4, 4 sender, 4 receiver, 32 ephemeral,
  16 encrypted nothing, 16 mac1, 16 mac2);
* cookie reply, type 3: 64 (4, 4 receiver, 24 nonce, 32 encrypted cookie);
* transport data, type 4: 16 bytes of header (4, 4 receiver, 8 counter), then the
  packet padded to a multiple of 16 and its 16-byte tag: at least 32 bytes, and
  a multiple of 16 in all.

Nothing here raises on malformed input: every function answers for any bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

INITIATION = 1
RESPONSE = 2
COOKIE_REPLY = 3
TRANSPORT_DATA = 4

INITIATION_LEN = 148
RESPONSE_LEN = 92
COOKIE_REPLY_LEN = 64
TRANSPORT_HEADER_LEN = 16
TRANSPORT_MIN_LEN = 32  # header + an empty (keepalive) packet's 16-byte tag

FIXED_LENGTHS = {INITIATION: INITIATION_LEN, RESPONSE: RESPONSE_LEN,
                 COOKIE_REPLY: COOKIE_REPLY_LEN}
NAMES = {INITIATION: "initiation", RESPONSE: "response", COOKIE_REPLY: "cookie_reply",
         TRANSPORT_DATA: "transport_data"}


@dataclass(frozen=True)
class Message:
    """One WireGuard message's clear header fields."""

    type: int
    length: int
    sender: bytes | None  # sender index (initiation, response)
    receiver: bytes | None  # receiver index (response, cookie reply, transport data)

    @property
    def name(self) -> str:
        return NAMES[self.type]


def parse(payload: bytes) -> Message | None:
    """The message a UDP payload is, or None if it cannot be WireGuard.

    The type byte must be 1–4 and the three reserved bytes zero; the handshake types
    must have their exact size, and transport data its minimum and 16-byte grain.
    """
    n = len(payload)
    if n < 4 or payload[1:4] != b"\x00\x00\x00":
        return None
    kind = payload[0]
    if kind in FIXED_LENGTHS:
        if n != FIXED_LENGTHS[kind]:
            return None
        if kind == INITIATION:
            return Message(kind, n, payload[4:8], None)
        if kind == RESPONSE:
            return Message(kind, n, payload[4:8], payload[8:12])
        return Message(kind, n, None, payload[4:8])
    if kind == TRANSPORT_DATA and n >= TRANSPORT_MIN_LEN and n % 16 == 0:
        return Message(kind, n, None, payload[4:8])
    return None


def is_initiation(payload: bytes) -> bool:
    """A handshake initiation: type 1, reserved zero, exactly 148 bytes."""
    return len(payload) == INITIATION_LEN and payload[:4] == b"\x01\x00\x00\x00"


def response_answers(initiation: bytes, response: bytes) -> bool:
    """Whether ``response`` is the handshake response to ``initiation``.

    The response's receiver index is the initiation's sender index (whitepaper
    §5.4.3), so a censor that holds the first packet can confirm the second
    against it: two fixed headers and an echoed random 32-bit value, which a pair
    of random payloads of those two sizes matches with odds of 2^-96.
    """
    first, second = parse(initiation), parse(response)
    return (first is not None and second is not None and first.type == INITIATION
            and second.type == RESPONSE and second.receiver == first.sender)
