"""Run an aiohttp application as a transport's listener, closable like an ``asyncio.Server``.

Why: the Snowflake bridge (WebSocket) and the meek server (HTTP) listen
themselves instead of wrapping accepted TCP connections, and PT server mode
needs their bound address and a way to close them, as it has for an
``asyncio.Server``.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

from aiohttp import web


@dataclass
class Listening:
    """A running application: where it listens, and how to stop it."""

    runner: web.AppRunner
    host: str
    port: int

    def close(self) -> None:
        asyncio.get_running_loop().create_task(self.runner.cleanup())

    async def aclose(self) -> None:
        await self.runner.cleanup()


async def listen(app: web.Application, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None) -> Listening:
    """Serve ``app`` on ``host:port`` (port 0: any) and say where it ended up."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    sock = site._server.sockets[0]  # type: ignore[union-attr]
    bound_host, bound_port = sock.getsockname()[:2]
    return Listening(runner, bound_host, bound_port)
