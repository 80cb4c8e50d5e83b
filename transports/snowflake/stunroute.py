"""STUN servers this host has no route to are left out of ICE gathering.

aioice sends its STUN Binding requests through an asyncio datagram transport,
which swallows the kernel's refusal of a datagram with no route; the request
is then retried until gathering's 5 s timeout. pion, which Tor's proxy and
client use, fails such a server at once. A proxy answers a client only after
gathering, so ours answered 5 s later than Tor's whenever its STUN server was
unroutable (a host with no IPv6 route and an IPv6 STUN address; the lab's
deliberately unroutable server), and the broker's client timeout is 5 s in
Snowflake 2.14 (docs/transports/snowflake.md).

Asking the kernel costs no packet: ``connect()`` on a UDP socket only looks up
the route. A server whose every address is refused this way is dropped; a name
that does not resolve is kept, for aioice to try as before.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterable

STUN_DEFAULT_PORT = 3478


def stun_host_port(url: str) -> tuple[str, int] | None:
    """(host, port) of a ``stun:`` URL (RFC 7064), or None for other URLs."""
    if not url.startswith("stun:"):
        return None
    rest = url[len("stun:"):].split("?", 1)[0]
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port = rest.partition(":")
    if not host:
        return None
    try:
        return host, int(port) if port else STUN_DEFAULT_PORT
    except ValueError:
        return None


def has_route(family: int, sockaddr: tuple) -> bool:
    """Whether the kernel would send a UDP datagram to ``sockaddr`` (no packet goes out)."""
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(sockaddr)
        return True
    except OSError:
        return False


async def routable_stun(urls: Iterable[str], route: Callable[[int, tuple], bool] = has_route,
                        ) -> tuple[list[str], list[str]]:
    """Split ``urls`` into (kept, dropped): a STUN URL is dropped when none of its
    addresses has a route. TURN and other URLs are always kept."""
    loop = asyncio.get_running_loop()
    kept: list[str] = []
    dropped: list[str] = []
    for url in urls:
        hp = stun_host_port(url)
        if hp is None:
            kept.append(url)
            continue
        try:
            infos = await loop.getaddrinfo(hp[0], hp[1], type=socket.SOCK_DGRAM)
        except (OSError, UnicodeError):
            kept.append(url)  # unresolved here: aioice resolves and reports it itself
            continue
        if any(route(family, addr) for family, _, _, _, addr in infos):
            kept.append(url)
        else:
            dropped.append(url)
    return kept, dropped
