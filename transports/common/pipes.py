"""An in-process byte pipe between two asyncio stream pairs, and detached tasks.

Why a kernel socket pair: transports that are not "wrap one TCP connection"
(meek's HTTP session, ScrambleSuit's frame pump, meek's hand-off to tor) must
still give callers ordinary (StreamReader, StreamWriter) inner streams. A
socket pair carries bytes both ways with the kernel's buffering, half-close and
back-pressure, so ``drain()`` and EOF behave as on a real connection.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Coroutine
from typing import Any

from transports.base import Streams

_running: set[asyncio.Task[Any]] = set()


async def stream_pair(limit_a: int = 1 << 16, limit_b: int = 1 << 16,
                      kernel_buffer: int | None = None) -> tuple[Streams, Streams]:
    """Two connected stream pairs: what one side writes, the other reads. With
    ``kernel_buffer``, each socket's send and receive buffers are that small, so
    what one read takes is too (docs/transports/budgets.md §2.1)."""
    a, b = socket.socketpair()
    if kernel_buffer is not None:
        for sock in (a, b):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, kernel_buffer)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, kernel_buffer)
    return (await asyncio.open_connection(sock=a, limit=limit_a),
            await asyncio.open_connection(sock=b, limit=limit_b))


def spawn(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Run ``coro`` in the background, keeping a reference until it ends (the loop
    holds tasks only weakly)."""
    task = asyncio.create_task(coro)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task
