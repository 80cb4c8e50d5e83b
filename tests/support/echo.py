"""The TCP echo upstream many transport tests put behind a server."""

from __future__ import annotations

import asyncio
import contextlib


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Send back everything until EOF, then close; a reset peer just ends it."""
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


async def start_echo_server(host: str = "127.0.0.1") -> tuple[asyncio.Server, int]:
    """An echo server on an ephemeral port, and that port."""
    server = await asyncio.start_server(echo, host, 0)
    return server, server.sockets[0].getsockname()[1]
