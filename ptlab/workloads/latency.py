"""Request latency through a transport: small keep-alive requests on one tunnel."""

from __future__ import annotations

import asyncio
import time

from ..plugins.base import Endpoint
from .http import HTTPError, read_body, read_head, send_get
from .tunnel import open_tunnel


async def request_latency(ns: str | None, ep: Endpoint, count: int, host: str = "web.lab",
                          timeout: float = 4.0) -> list[float]:
    """Milliseconds for each of `count` GET /ping round trips over one tunnel.

    Returns the samples gathered before any failure (possibly none).
    """
    samples: list[float] = []
    try:
        reader, writer = await open_tunnel(ns, ep, timeout)
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
        return samples
    try:
        for _ in range(count):
            t0 = time.monotonic()
            await send_get(writer, "/ping", host)
            resp = await asyncio.wait_for(read_head(reader), timeout)
            await read_body(reader, resp, idle_timeout=timeout)
            samples.append((time.monotonic() - t0) * 1000)
    except (OSError, HTTPError, TimeoutError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()
    return samples


async def bootstrap(
    ns: str | None, ep: Endpoint, deadline_s: float, host: str = "web.lab"
) -> float | None:
    """Seconds until the first request through the transport succeeds, or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        left = deadline_s - (time.monotonic() - t0)
        if await request_latency(ns, ep, 1, host, timeout=min(2.0, max(left, 0.1))):
            return time.monotonic() - t0
        await asyncio.sleep(0.1)
    return None
