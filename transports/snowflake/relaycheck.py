"""Whether a proxy may relay to the URL a broker gave it.

A volunteer's proxy opens a WebSocket to whatever relay URL the broker names,
from the volunteer's network. A compromised or mistaken broker could aim it
at the volunteer's router or another internal service, so before answering
an offer the proxy refuses (Tor's ``checkIsRelayURLAcceptable``, extended):

* a non-``wss`` URL, unless the operator allows non-TLS relays;
* a host outside the allowed hostname pattern (:mod:`.relaypattern`);
* a host that *resolves* to a private, loopback, link-local or otherwise
  internal address (including the lab's 198.18.0.0/15), unless the operator
  allows private relays or the pattern names that address literally
  (``^198.18.5.2$``): a name in the pattern must not smuggle in an internal
  address through DNS.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from .relaypattern import RelayPattern

Resolver = Callable[[str], Awaitable[list[str]]]

INTERNAL_NETS = [ipaddress.ip_network(n) for n in ("198.18.0.0/15", "2001:db8::/32")]


class RelayRefused(ValueError):
    """A relay URL the proxy will not use, and why."""


async def system_resolver(host: str) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def is_internal(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    return (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved
            or ip.is_unspecified or ip.is_multicast or any(
                ip in n for n in INTERNAL_NETS if n.version == ip.version))


async def check_relay(url: str, pattern: str, *, allow_non_tls: bool = False,
                      allow_private: bool = False, resolver: Resolver = system_resolver) -> str:
    """The URL's hostname if the proxy may relay there; else :class:`RelayRefused`."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # a malformed port raises here
    except ValueError as exc:
        raise RelayRefused(f"malformed relay URL ({exc})") from None
    if parts.scheme not in ("wss", "ws") or not host:
        raise RelayRefused("relay URL must be ws:// or wss:// with a host")
    if parts.scheme != "wss" and not allow_non_tls:
        raise RelayRefused("non-TLS relay URL (allow it explicitly)")
    rule = RelayPattern.parse(pattern)
    if not rule.matches(host):
        raise RelayRefused(f"relay host outside the allowed pattern {pattern!r}")
    if allow_private:
        return host
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        if is_internal(host) and not rule.exact:
            raise RelayRefused("relay address is internal and the pattern does not name it")
        return host
    try:
        addrs = await resolver(host)
    except OSError as exc:
        raise RelayRefused(f"cannot resolve the relay host ({exc})") from None
    if not addrs:
        raise RelayRefused("the relay host has no address")
    if any(is_internal(a) for a in addrs):
        raise RelayRefused("the relay host resolves to an internal address")
    return host
