"""QUIC v1 Initial decryption and the GFW's 2024 QUIC-SNI blocker.

A QUIC client's first datagram is an Initial packet whose protection keys
derive from its own Destination Connection ID and a published salt (RFC 9001
§5.2), so any on-path censor can decrypt it and read the ClientHello. The GFW
began doing so in 2024 (Zohaib et al., USENIX Security 2025; docs/censors/quic.md §1):

* only the first UDP datagram of a flow is inspected (a flow unseen for 60 s
  is new again);
* it blocks only when the source port is above the destination port (§3.3
  and Fig. 11: equal ports were never blocked);
* QUIC v1 only (v2 Initials pass);
* its parser wants the ClientHello in the CRYPTO frame(s) that come first,
  ignores a CRYPTO frame's length field (so "length 0 but with a payload" is
  still read), and gives up when CRYPTO frames are mixed with PING/PADDING
  frames (Table 3, vectors 6 and 8).

:func:`parse_initial` is the RFC-faithful parser; :func:`gfw2024_sni`
reproduces the blocker's view.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from ptcommon import tlshello

from . import tls

V1 = 0x00000001
V1_SALT = bytes.fromhex("38762cf7f55934b34d179ae6a4c80cadccbb7f0a")  # RFC 9001 §5.2
MAX_CID = 20
PADDING, PING, CRYPTO = 0x00, 0x01, 0x06


def _hkdf_extract(salt: bytes, ikm: bytes) -> bytes:
    import hmac

    return hmac.new(salt, ikm, "sha256").digest()


def hkdf_expand_label(secret: bytes, label: str, length: int) -> bytes:
    """TLS 1.3's HKDF-Expand-Label with an empty context (RFC 8446 §7.1)."""
    full = b"tls13 " + label.encode()
    info = struct.pack("!HB", length, len(full)) + full + b"\x00"
    return HKDFExpand(hashes.SHA256(), length, info).derive(secret)


def client_initial_keys(dcid: bytes) -> tuple[bytes, bytes, bytes]:
    """(key, iv, hp) protecting a v1 client Initial sent to `dcid` (RFC 9001 §5.2)."""
    secret = hkdf_expand_label(_hkdf_extract(V1_SALT, dcid), "client in", 32)
    return (hkdf_expand_label(secret, "quic key", 16), hkdf_expand_label(secret, "quic iv", 12),
            hkdf_expand_label(secret, "quic hp", 16))


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A QUIC variable-length integer (RFC 9000 §16) at `pos`: (value, new pos)."""
    if pos >= len(data):
        raise ValueError("truncated varint")
    n = 1 << (data[pos] >> 6)
    if pos + n > len(data):
        raise ValueError("truncated varint")
    value = data[pos] & 0x3F
    for b in data[pos + 1:pos + n]:
        value = (value << 8) | b
    return value, pos + n


def hp_mask(hp: bytes, sample: bytes) -> bytes:
    enc = Cipher(algorithms.AES(hp), modes.ECB()).encryptor()
    return enc.update(sample) + enc.finalize()


@dataclass
class QuicInitial:
    version: int
    dcid: bytes
    scid: bytes
    token: bytes
    packet_number: int
    payload: bytes  # decrypted frames
    frames: list[tuple[int, int, bytes]] = field(default_factory=list)  # (type, offset, data)

    @property
    def crypto(self) -> bytes:
        """CRYPTO data reassembled from offset 0 (RFC 9000 §19.6)."""
        chunks = sorted((off, data) for t, off, data in self.frames if t == CRYPTO)
        out = bytearray()
        for off, data in chunks:
            if off > len(out):
                break
            out[off:off + len(data)] = data
        return bytes(out)

    @property
    def client_hello(self) -> tlshello.ClientHello | None:
        return tlshello.parse_client_hello_message(self.crypto)

    @property
    def sni(self) -> str | None:
        ch = self.client_hello
        return ch.sni if ch else None


def _unprotect(datagram: bytes) -> tuple[int, bytes, bytes, bytes, int, bytes] | None:
    """:func:`_unprotect_raw`, with truncation of any field meaning "not an Initial"."""
    try:
        return _unprotect_raw(datagram)
    except (ValueError, IndexError):
        return None


def _unprotect_raw(datagram: bytes) -> tuple[int, bytes, bytes, bytes, int, bytes] | None:
    """Long-header parse, header-protection removal and AEAD decryption of a v1 Initial:
    (version, dcid, scid, token, packet number, plaintext) or None."""
    d = datagram
    if len(d) < 7 or d[0] & 0xC0 != 0xC0 or (d[0] >> 4) & 0x03 != 0:
        return None
    version = struct.unpack_from("!I", d, 1)[0]
    if version != V1:
        return None
    pos = 5
    dl = d[pos]
    if dl > MAX_CID or len(d) < pos + 1 + dl + 1:
        return None
    dcid = d[pos + 1:pos + 1 + dl]
    pos += 1 + dl
    sl = d[pos]
    if sl > MAX_CID or len(d) < pos + 1 + sl:
        return None
    scid = d[pos + 1:pos + 1 + sl]
    pos += 1 + sl
    tlen, pos = read_varint(d, pos)
    token = d[pos:pos + tlen]
    pos += tlen
    length, pos = read_varint(d, pos)
    if length < 20 or pos + length > len(d):
        return None
    key, iv, hp = client_initial_keys(dcid)
    sample = d[pos + 4:pos + 20]
    mask = hp_mask(hp, sample)
    first = d[0] ^ (mask[0] & 0x0F)
    pn_len = (first & 0x03) + 1
    pn_bytes = bytes(d[pos + i] ^ mask[1 + i] for i in range(pn_len))
    pn = int.from_bytes(pn_bytes, "big")
    header = bytes([first]) + d[1:pos] + pn_bytes
    nonce = (int.from_bytes(iv, "big") ^ pn).to_bytes(12, "big")
    try:
        plain = AESGCM(key).decrypt(nonce, d[pos + pn_len:pos + length], header)
    except Exception:  # noqa: BLE001 - any failure to authenticate means "not an Initial"
        return None
    return version, dcid, scid, token, pn, plain


_NOT_PADDING = re.compile(rb"[^\x00]")


def parse_frames(plain: bytes) -> list[tuple[int, int, bytes]] | None:
    """PADDING, PING, ACK and CRYPTO frames of an Initial; None on anything else."""
    frames: list[tuple[int, int, bytes]] = []
    pos = 0
    try:
        while pos < len(plain):
            t = plain[pos]
            pos += 1
            if t == PADDING:
                # A run of PADDING is one frame here; found in C, not byte by byte (an
                # Initial is padded to 1,200 bytes: the loop was most of its parse).
                start = pos - 1
                more = _NOT_PADDING.search(plain, pos)
                pos = more.start() if more is not None else len(plain)
                frames.append((PADDING, start, b""))
            elif t == PING:
                frames.append((PING, pos - 1, b""))
            elif t == CRYPTO:
                off, pos = read_varint(plain, pos)
                n, pos = read_varint(plain, pos)
                if pos + n > len(plain):
                    return None
                frames.append((CRYPTO, off, plain[pos:pos + n]))
                pos += n
            elif t in (0x02, 0x03):  # ACK (ECN): skip its fields
                _, pos = read_varint(plain, pos)
                _, pos = read_varint(plain, pos)
                count, pos = read_varint(plain, pos)
                _, pos = read_varint(plain, pos)
                for _ in range(count * 2):
                    _, pos = read_varint(plain, pos)
                if t == 0x03:
                    for _ in range(3):
                        _, pos = read_varint(plain, pos)
            else:
                return None
    except ValueError:
        return None
    return frames


def parse_initial(datagram: bytes) -> QuicInitial | None:
    """The first packet of `datagram` as a client Initial (RFC 9000/9001), or None."""
    got = _unprotect(datagram)
    if got is None:
        return None
    version, dcid, scid, token, pn, plain = got
    frames = parse_frames(plain)
    if frames is None:
        return None
    return QuicInitial(version, dcid, scid, token, pn, plain, frames)


def gfw2024_sni(datagram: bytes) -> str | None:
    """The SNI exactly when the GFW's 2024 parser would extract it (Table 3).

    After decryption it reads frames from the start: PADDING is skipped;
    CRYPTO frames are taken with their data running to the next frame it
    recognises or the end (the length field is not trusted, vector 6); a PING
    among the CRYPTO frames makes it give up (vector 8).
    """
    got = _unprotect(datagram)
    if got is None:
        return None
    plain = got[5]
    pos, crypto = 0, bytearray()
    try:
        while pos < len(plain):
            t = plain[pos]
            if t == PADDING:
                pos += 1
                continue
            if t != CRYPTO:
                return None  # PING or anything else: the parser gives up
            off, p = read_varint(plain, pos + 1)
            n, p = read_varint(plain, p)
            if off != len(crypto):
                return None
            data = plain[p:p + n] if n else plain[p:].rstrip(b"\x00")
            crypto += data
            pos = p + len(data)
            hello = tlshello.parse_client_hello_message(bytes(crypto))
            if hello is not None:
                return hello.sni
    except ValueError:
        return None
    return None


def gfw2024_should_block(datagram: bytes, sport: int, dport: int, blocklist: Sequence[str],
                         mode: str = "suffix") -> str | None:
    """The matched blocklist entry if the GFW would block this *first* datagram of a
    flow (the caller ensures first-ness), else None."""
    if sport <= dport:
        return None
    return tls.sni_matches(gfw2024_sni(datagram), blocklist, mode)
