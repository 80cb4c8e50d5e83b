"""Copying bytes both ways between two stream pairs until both sides are done."""

from __future__ import annotations

import asyncio
import contextlib

from transports.base import Streams

CHUNK = 65536


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> int:
    total = 0
    try:
        while data := await src.read(CHUNK):
            dst.write(data)
            total += len(data)
            await dst.drain()
    except (ConnectionError, OSError, asyncio.IncompleteReadError):
        pass
    finally:
        # Half-close so the other direction can still finish (HTTP/1.0 style).
        with contextlib.suppress(OSError, RuntimeError, AttributeError):
            if dst.can_write_eof():
                dst.write_eof()
    return total


async def relay(a: Streams, b: Streams) -> tuple[int, int]:
    """Pipe a<->b; return (bytes a→b, bytes b→a). Closes both writers."""
    try:
        up, down = await asyncio.gather(_copy(a[0], b[1]), _copy(b[0], a[1]))
    finally:
        for w in (a[1], b[1]):
            w.close()
            with contextlib.suppress(Exception):
                await w.wait_closed()
    return up, down
