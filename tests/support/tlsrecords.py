"""A real ClientHello record, as Python's OpenSSL sends it, for censor tests."""

from __future__ import annotations

import random
import ssl
import struct

from tests.support import quic_vectors


def client_hello(sni: str) -> bytes:
    """The first flight of a default-context TLS client naming `sni`."""
    out = ssl.MemoryBIO()
    obj = ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), out, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def crafted_client_hello(sni: str, ech: bool = False, seed: int = 1) -> bytes:
    """A TLS 1.3 ClientHello record built byte by byte, optionally with an
    encrypted_client_hello extension (which Python's ssl cannot send)."""
    msg = quic_vectors.client_hello(sni, ["h2"], random.Random(seed), ech=ech)
    return b"\x16\x03\x01" + struct.pack("!H", len(msg)) + msg


def split_records(record: bytes, at: int) -> bytes:
    """One handshake record re-framed as two, its body cut ``at`` bytes in: the
    ClientHello fragmented over two TLS records in one stream (TLS 1.3 allows it,
    RFC 8446 §5.1; DPYProxy's circumvention, Niere et al. 2023)."""
    body = record[5:5 + int.from_bytes(record[3:5], "big")]
    head = record[:3]
    return (head + struct.pack("!H", at) + body[:at]
            + head + struct.pack("!H", len(body) - at) + body[at:])


def sni_span(record: bytes) -> tuple[int, int]:
    """Where the server_name extension lies in a ClientHello record: the offsets
    (from the record's first byte) of its type field and of the byte after it."""
    pos = 5 + 4 + 2 + 32
    pos += 1 + record[pos]  # session id
    pos += 2 + int.from_bytes(record[pos:pos + 2], "big")  # cipher suites
    pos += 1 + record[pos]  # compression methods
    end = pos + 2 + int.from_bytes(record[pos:pos + 2], "big")
    pos += 2
    while pos < end:
        ext_type = int.from_bytes(record[pos:pos + 2], "big")
        ext_end = pos + 4 + int.from_bytes(record[pos + 2:pos + 4], "big")
        if ext_type == 0:
            return pos, ext_end
        pos = ext_end
    raise ValueError("no server_name extension")
