"""Domain fronting for HTTP clients: where to connect, and what the Host header says.

meek and Conjure's registration (and Snowflake's rendezvous) put the real
server's name only in the encrypted Host header, while DNS, the TCP connection
and the TLS SNI go to an innocuous front. As meek-client does, ``front`` replaces
the URL's host *and port*.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


class FrontingError(ValueError):
    pass


def fronted(url: str, front: str = "") -> tuple[str, str]:
    """(URL to request, Host header) for ``url`` reached through ``front``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FrontingError(f"url {url!r} must be http:// or https:// with a host")
    host = parts.netloc.rpartition("@")[2]
    front = front.strip()
    if front:
        if "/" in front or "@" in front:
            raise FrontingError(f"bad front {front!r}")
        parts = parts._replace(netloc=front)
    return urlunsplit(parts._replace(path=parts.path or "/")), host
