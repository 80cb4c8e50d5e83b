"""Upstream connections that stop being read early (docs/transports/budgets.md §2.1).

A server that relays to an upstream (tor's ORPort, a lab destination) reads it
through asyncio's ``StreamReader``, which pauses the socket only once more than
twice its limit is buffered, and each read takes whatever the kernel holds, up
to 256 KiB. Behind a client that never reads, every relayed connection then
holds about 300 KiB the server cannot account for. :func:`open_bounded` opens
the connection with a small kernel receive buffer and a small reader limit, so
what the process holds of it stays below :func:`read_bound`, and an upstream
that sends faster than the client reads meets a closed TCP window instead.
"""

from __future__ import annotations

import asyncio
import socket

from transports.base import Streams

#: The receive buffer a bounded upstream gets (SO_RCVBUF; Linux doubles it). On
#: loopback, where tor's ORPort is, 32 KiB of window still moves tens of MB/s.
READ_BUFFER = 16 * 1024


def read_bound(read_buffer: int = READ_BUFFER) -> int:
    """The most a bounded upstream's reader holds: twice its limit (half the
    buffer) before it pauses, plus one read of what the kernel held (twice the
    buffer, as Linux doubles SO_RCVBUF)."""
    return read_buffer + 2 * read_buffer


async def open_bounded(host: str, port: int, read_buffer: int = READ_BUFFER) -> Streams:
    """``asyncio.open_connection(host, port)`` with a bounded read side."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            # Before connect(), so the window announced in the handshake is already small.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, read_buffer)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock, limit=max(1, read_buffer // 2))
    raise error
