"""ScrambleSuit's session keys and frames (docs/transports/scramblesuit.md §4; obfs4proxy's
``transports/scramblesuit/conn.go`` for the byte layout its client expects).

Keys: HKDF-SHA256 *expand only* over the 32-byte master key, no info, 144
bytes: the client's sending AES-256 key [0:32] and IV prefix [32:40], the
server's sending key [40:72] and prefix [72:80], then the HMAC keys of the
client's direction [80:112] and of the server's [112:144]. Each direction is one
AES-CTR stream whose 16-byte counter block starts as the 8-byte prefix then a
64-bit big-endian 1.

A frame is ``MAC | E(header | payload | padding)``: the header is total length
(2), payload length (2) and flags (1), all under AES-CTR with the rest, and the
MAC is HMAC-SHA256-128 over that ciphertext (encrypt-then-MAC). A frame carries
at most 1427 bytes after its header (1448 with the 21 bytes of overhead).
Flags: 1 payload, 2 new ticket (32-byte key then the 112-byte ticket),
4 PRNG seed (32 bytes).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from .handshake import MAC_LENGTH, mac128

HEADER_LENGTH = 5
OVERHEAD = MAC_LENGTH + HEADER_LENGTH
MAX_SEGMENT = 1448
MAX_PAYLOAD = 1427
FLAG_PAYLOAD, FLAG_NEW_TICKET, FLAG_PRNG_SEED = 1, 2, 4
PRNG_SEED_LENGTH = 32
KDF_LENGTH = 144
_INITIAL_COUNTER = (1).to_bytes(8, "big")


class FrameError(ValueError):
    """A frame that fails its MAC, lies about its lengths or carries an unknown flag."""


@dataclass(frozen=True)
class DirectionKeys:
    aes_key: bytes
    iv_prefix: bytes
    mac_key: bytes


def session_keys(master: bytes) -> tuple[DirectionKeys, DirectionKeys]:
    """(client -> server keys, server -> client keys) for a master key."""
    okm = HKDFExpand(hashes.SHA256(), KDF_LENGTH, None).derive(master)
    return (DirectionKeys(okm[0:32], okm[32:40], okm[80:112]),
            DirectionKeys(okm[40:72], okm[72:80], okm[112:144]))


class Encoder:
    """Frames for one direction."""

    def __init__(self, keys: DirectionKeys) -> None:
        self._ctr = Cipher(algorithms.AES(keys.aes_key),
                           modes.CTR(keys.iv_prefix + _INITIAL_COUNTER)).encryptor()
        self._mac_key = keys.mac_key

    def frame(self, flags: int, data: bytes = b"", pad: int = 0) -> bytes:
        total = len(data) + pad
        if total > MAX_PAYLOAD:
            raise ValueError(f"frame of {total} bytes exceeds {MAX_PAYLOAD}")
        plain = total.to_bytes(2, "big") + len(data).to_bytes(2, "big") + bytes([flags]) + \
            data + bytes(pad)
        cipher = self._ctr.update(plain)
        return mac128(self._mac_key, cipher) + cipher

    def payload(self, data: bytes) -> bytes:
        """``data`` in as many full payload frames as it needs."""
        return b"".join(self.frame(FLAG_PAYLOAD, data[i:i + MAX_PAYLOAD])
                        for i in range(0, len(data), MAX_PAYLOAD))

    def padding(self, length: int) -> bytes:
        """Exactly ``length`` bytes of padding frames (``length`` >= 21, or 0)."""
        if length == 0:
            return b""
        if length < OVERHEAD:
            raise ValueError(f"padding of {length} bytes cannot hold a frame")
        out = b""
        while length > MAX_SEGMENT:
            # Two frames when one cannot hold it; the first leaves room for the second.
            chunk = min(MAX_SEGMENT, length - OVERHEAD)
            out += self.frame(FLAG_PAYLOAD, b"", chunk - OVERHEAD)
            length -= chunk
        return out + self.frame(FLAG_PAYLOAD, b"", length - OVERHEAD)


class Decoder:
    """Frames for one direction, fed in any pieces; :meth:`feed` returns whole frames."""

    def __init__(self, keys: DirectionKeys) -> None:
        self._ctr = Cipher(algorithms.AES(keys.aes_key),
                           modes.CTR(keys.iv_prefix + _INITIAL_COUNTER)).decryptor()
        self._mac_key = keys.mac_key
        self._buf = bytearray()
        self._header: tuple[bytes, bytes, int, int, int] | None = None

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """(flags, payload) of each frame completed by ``data``."""
        self._buf += data
        out: list[tuple[int, bytes]] = []
        while True:
            if self._header is None:
                if len(self._buf) < OVERHEAD:
                    return out
                mac, raw = bytes(self._buf[:MAC_LENGTH]), bytes(self._buf[MAC_LENGTH:OVERHEAD])
                del self._buf[:OVERHEAD]
                plain = self._ctr.update(raw)
                total, length, flags = (int.from_bytes(plain[0:2], "big"),
                                        int.from_bytes(plain[2:4], "big"), plain[4])
                if length > total or total > MAX_PAYLOAD:
                    raise FrameError("frame lengths are invalid")
                self._header = (mac, raw, total, length, flags)
            mac, raw, total, length, flags = self._header
            if len(self._buf) < total:
                return out
            body = bytes(self._buf[:total])
            del self._buf[:total]
            self._header = None
            if not hmac.compare_digest(mac128(self._mac_key, raw + body), mac):
                raise FrameError("frame MAC does not verify")
            plain = self._ctr.update(body)
            if flags not in (FLAG_PAYLOAD, FLAG_NEW_TICKET, FLAG_PRNG_SEED):
                raise FrameError(f"unknown frame flags {flags}")
            out.append((flags, plain[:length]))
