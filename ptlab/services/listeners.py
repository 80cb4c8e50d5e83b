"""The sockets of one lab service and the connections they hand to handlers.

Why this exists: a stream handler spends its life waiting on an idle read, so
closing the listening servers alone leaves every handler running until the
event loop dies, and the loop then logs each one as destroyed while pending.
:class:`Listeners` remembers the handlers it runs and ends them on
:meth:`Listeners.close`, after the servers stop accepting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class Listeners:
    """UDP endpoints, TCP servers and open stream connections of one service."""

    def __init__(self) -> None:
        self.udp: list[asyncio.BaseTransport] = []
        self.tcp: list[asyncio.Server] = []
        self._handlers: set[asyncio.Task[object]] = set()

    @contextlib.asynccontextmanager
    async def connection(self, writer: asyncio.StreamWriter) -> AsyncIterator[None]:
        """Around a stream handler's body: closes the writer however the body ends,
        and turns the cancellation that :meth:`close` sends into a quiet end (3.11's
        ``start_server`` logs a handler that ends cancelled)."""
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            yield
        except asyncio.CancelledError:
            pass
        finally:
            if task is not None:
                self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @property
    def open_connections(self) -> int:
        return len(self._handlers)

    async def close(self) -> None:
        """Stop accepting, end the open connections, and wait for both."""
        for tr in self.udp:
            tr.close()
        for srv in self.tcp:
            srv.close()
        handlers = list(self._handlers)
        for t in handlers:
            t.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        for srv in self.tcp:
            with contextlib.suppress(Exception):
                await srv.wait_closed()
        self.udp.clear()
        self.tcp.clear()
