"""Client Initial datagrams built from scratch, including Table 3's parser probes.

Zohaib et al. (USENIX Security 2025, Table 3; docs/censors/quic.md §2) probed the
GFW's QUIC parser with crafted Initials. This module builds equivalent ones
with our own encoder (a TLS 1.3 ClientHello in CRYPTO frames, padded to 1200
bytes, protected per RFC 9001; QUIC v2 per RFC 9369), so the unit tests and
the live test share one source of truth: :data:`TABLE3` maps each variant to
whether the GFW blocked it.
"""

from __future__ import annotations

import random
import struct

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from censor_sim.detectors.quic import V1, client_initial_keys, hkdf_expand_label, hp_mask

V2 = 0x6B3343CF
V2_SALT = bytes.fromhex("0dede3def700a6db819381be6e269dcbf9bd2ed9")  # RFC 9369 §3.3.1

# variant -> blocked by the GFW (Table 3)
TABLE3: dict[str, bool] = {
    "pn1": True,              # 1-byte packet number
    "truncated": False,       # last byte removed: authentication fails
    "v2-bad-tag": False,      # version 2 with a v1-protected (so invalid) tag
    "zero-cids": True,        # both connection IDs of length 0
    "scid-255": False,        # SCID length 255: invalid
    "crypto-len-0": True,     # CRYPTO frame length 0 but followed by its data
    "alpn-only": False,       # forbidden domain only in ALPN
    "crypto-ping-mix": False,  # CRYPTO frames with PING/PADDING between them
    "ech-outer": False,       # ECH, with an outer SNI cloudflare-ech.com
    "v2": False,              # a real QUIC v2 Initial
}


def _varint(v: int) -> bytes:
    if v < 0x40:
        return bytes([v])
    if v < 0x4000:
        return struct.pack("!H", 0x4000 | v)
    return struct.pack("!I", 0x80000000 | v)


def _ext(t: int, body: bytes) -> bytes:
    return struct.pack("!HH", t, len(body)) + body


def _v16(b: bytes) -> bytes:
    return struct.pack("!H", len(b)) + b


def client_hello(sni: str | None, alpn: list[str], rng: random.Random,
                 ech: bool = False) -> bytes:
    """A TLS 1.3 ClientHello handshake message as a QUIC client sends it."""
    exts = b""
    if sni:
        exts += _ext(0, _v16(b"\x00" + _v16(sni.encode())))
    exts += _ext(10, _v16(b"\x00\x1d\x00\x17"))
    exts += _ext(13, _v16(b"\x04\x03\x08\x04\x04\x01"))
    if alpn:
        exts += _ext(16, _v16(b"".join(bytes([len(a)]) + a.encode() for a in alpn)))
    exts += _ext(43, b"\x02\x03\x04")
    exts += _ext(51, _v16(b"\x00\x1d" + _v16(rng.randbytes(32))))
    exts += _ext(57, rng.randbytes(40))  # quic_transport_parameters (opaque here)
    if ech:
        exts += _ext(0xFE0D, rng.randbytes(200))
    body = (b"\x03\x03" + rng.randbytes(32) + b"\x00" + _v16(b"\x13\x01\x13\x02\x13\x03")
            + b"\x01\x00" + _v16(exts))
    return b"\x01" + len(body).to_bytes(3, "big") + body


def _keys(version: int, dcid: bytes) -> tuple[bytes, bytes, bytes]:
    if version != V2:
        return client_initial_keys(dcid)
    import hmac

    secret = hkdf_expand_label(hmac.new(V2_SALT, dcid, "sha256").digest(), "client in", 32)
    return (hkdf_expand_label(secret, "quicv2 key", 16), hkdf_expand_label(secret, "quicv2 iv", 12),
            hkdf_expand_label(secret, "quicv2 hp", 16))


def protect(frames: bytes, *, version: int = V1, dcid: bytes, scid: bytes, pn: int = 0,
            pn_len: int = 2, key_version: int | None = None, scid_len: int | None = None,
            size: int = 1200) -> bytes:
    """One client Initial carrying `frames` (padded so the datagram is `size` bytes)."""
    key, iv, hp = _keys(key_version or version, dcid)
    type_bits = 0b01 if version == V2 else 0b00
    first = 0xC0 | (type_bits << 4) | (pn_len - 1)
    head = (bytes([first]) + struct.pack("!I", version) + bytes([len(dcid)]) + dcid
            + bytes([len(scid) if scid_len is None else scid_len]) + scid + _varint(0))
    overhead = len(head) + 2 + pn_len + 16
    if len(frames) + overhead < size:
        frames += bytes(size - overhead - len(frames))
    length = pn_len + len(frames) + 16
    header = head + struct.pack("!H", 0x4000 | length) + pn.to_bytes(pn_len, "big")
    nonce = (int.from_bytes(iv, "big") ^ pn).to_bytes(12, "big")
    sealed = AESGCM(key).encrypt(nonce, frames, header)
    pn_off = len(header) - pn_len
    mask = hp_mask(hp, sealed[4 - pn_len:20 - pn_len])
    out = bytearray(header + sealed)
    out[0] ^= mask[0] & 0x0F
    for i in range(pn_len):
        out[pn_off + i] ^= mask[1 + i]
    return bytes(out)


def build_initial(sni: str, variant: str = "normal", seed: int = 0) -> bytes:
    """A client Initial naming `sni`, shaped as Table 3's `variant` (or "normal")."""
    rng = random.Random(seed)
    dcid, scid = rng.randbytes(8), rng.randbytes(8)
    hello_sni, alpn = sni, ["h3"]
    if variant == "alpn-only":
        hello_sni, alpn = "allowed.lab", [sni]
    ech = variant == "ech-outer"
    if ech:
        hello_sni = "cloudflare-ech.com"
    ch = client_hello(hello_sni, alpn, rng, ech=ech)
    frames = b"\x06" + _varint(0) + _varint(len(ch)) + ch
    kw: dict = {"dcid": dcid, "scid": scid}
    if variant == "pn1":
        kw["pn_len"] = 1
    elif variant == "zero-cids":
        kw.update(dcid=b"", scid=b"")
    elif variant == "crypto-len-0":
        frames = b"\x06" + _varint(0) + _varint(0) + ch
    elif variant == "crypto-ping-mix":
        half = len(ch) // 2
        frames = (b"\x06" + _varint(0) + _varint(half) + ch[:half] + b"\x01\x00\x00"
                  + b"\x06" + _varint(half) + _varint(len(ch) - half) + ch[half:])
    elif variant == "v2-bad-tag":
        kw.update(version=V2, key_version=V1)
    elif variant == "v2":
        kw["version"] = V2
    elif variant == "scid-255":
        kw["scid_len"] = 255
    out = protect(frames, **kw)
    return out[:-1] if variant == "truncated" else out


def long_header(size: int, version: int = V1) -> bytes:
    """A `size`-byte datagram that only looks like a QUIC long header: what a
    size-and-version rule (Russia's 2022 TSPU) reads, and no more."""
    return (bytes([0xC3]) + struct.pack("!I", version) + bytes(size))[:size]
