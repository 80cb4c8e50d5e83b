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
