"""A server's TLS context from PEM files, shared by the servers that may
terminate TLS themselves (meek, the Snowflake bridge, WebTunnel)."""

from __future__ import annotations

import ssl


def server_tls(cert: str | None, key: str | None, who: str) -> ssl.SSLContext | None:
    """The context for ``cert``/``key``; None when neither is given.

    A bad pair is a configuration error, reported in one line naming ``who``
    (the PT layer turns it into an SMETHOD-ERROR) rather than a traceback."""
    if not cert and not key:
        return None
    if not (cert and key):
        raise ValueError(f"{who}: cert and key go together")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"{who}: cannot load cert/key: {exc}") from None
    return ctx
