"""Opening a stream through a transport from the client namespace.

The socket is created inside the client namespace (netns.nsenter), so the
workload runs in the runner's process but its packets take the client's real
datapath: SOCKS5 front → transport → censor → bridge → web node.
"""

from __future__ import annotations

import asyncio
import socket

from netns.nsenter import ns_socket
from transports.pt import socks5

from ..plugins.base import Endpoint
from .http import client_tls


async def ns_open_connection(ns: str | None, host: str, port: int,
                             timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = ns_socket(ns, family, socket.SOCK_STREAM)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), timeout)
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock, limit=1 << 20)


class TunnelError(ConnectionError):
    """The transport's SOCKS front refused or failed the CONNECT."""


async def open_tunnel(ns: str | None, ep: Endpoint,
                      timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the transport's SOCKS5 front and CONNECT to its bridge (or, for a
    tunnel row, straight to the target: the routes take it through the tunnel)."""
    reader, writer = await _open_tunnel(ns, ep, timeout)
    if ep.inner_tls_ca:
        try:
            await writer.start_tls(client_tls(ep.inner_tls_ca), server_hostname=ep.inner_tls_host,
                                   ssl_handshake_timeout=timeout)
        except BaseException:
            writer.close()
            raise
    return reader, writer


async def _open_tunnel(ns: str | None, ep: Endpoint,
                       timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if not ep.socks:
        return await ns_open_connection(ns, ep.target_host, ep.target_port, timeout)
    reader, writer = await ns_open_connection(ns, ep.socks_host, ep.socks_port, timeout)
    try:
        await asyncio.wait_for(
            socks5.client_connect(reader, writer, ep.target_host, ep.target_port, ep.args),
            timeout)
    except socks5.SocksError as exc:
        writer.close()
        raise TunnelError(f"SOCKS5: {exc}") from exc
    except BaseException:
        writer.close()
        raise
    return reader, writer
