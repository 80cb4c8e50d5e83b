"""Run an aiohttp application as a transport's listener, closable like an ``asyncio.Server``.

Why: the Snowflake bridge (WebSocket) and the meek server (HTTP) listen
themselves instead of wrapping accepted TCP connections, and PT server mode
needs their bound address and a way to close them, as it has for an
``asyncio.Server``. Both face strangers, so they listen behind an
:class:`~transports.common.httpguard.HttpGuard` (head and body deadlines,
connection caps, early 413).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

from aiohttp import web

from .httpguard import HttpGuard, serve


@dataclass
class Listening:
    """A running application: where it listens, and how to stop it."""

    runner: web.AppRunner
    host: str
    port: int
    server: asyncio.Server | None = None
    guard: HttpGuard | None = None

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        asyncio.get_running_loop().create_task(self.runner.cleanup())

    async def aclose(self) -> None:
        if self.server is not None:
            self.server.close()
        await self.runner.cleanup()


async def listen(app: web.Application, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None,
                 guard: HttpGuard | None = None) -> Listening:
    """Serve ``app`` on ``host:port`` (port 0: any) behind ``guard`` (default limits
    when None) and say where it ended up."""
    guard = guard or HttpGuard()
    runner, server = await serve(app, host, port, ssl_context, guard)
    bound_host, bound_port = server.sockets[0].getsockname()[:2]
    return Listening(runner, bound_host, bound_port, server, guard)
