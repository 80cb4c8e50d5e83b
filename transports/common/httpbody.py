"""Read an HTTP response body up to a limit.

Why: aiohttp's ``content.read(n)`` returns as soon as *some* bytes are there, so
one call can cut a body short (a partial SDP, a truncated meek response) and
leave the rest unread on a connection that then cannot be reused. Callers that
want "the body, at most n bytes" (Go's ``io.ReadAll(io.LimitReader(body, n))``)
use :func:`read_limited`.
"""

from __future__ import annotations

import aiohttp


async def read_limited(content: aiohttp.StreamReader, limit: int) -> bytes:
    """Everything up to EOF, or the first ``limit`` bytes of a longer body."""
    data = bytearray()
    while len(data) < limit:
        chunk = await content.read(limit - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)
