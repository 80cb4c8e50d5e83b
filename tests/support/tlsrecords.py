"""A real ClientHello record, as Python's OpenSSL sends it, for censor tests."""

from __future__ import annotations

import ssl


def client_hello(sni: str) -> bytes:
    """The first flight of a default-context TLS client naming `sni`."""
    out = ssl.MemoryBIO()
    obj = ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), out, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()
