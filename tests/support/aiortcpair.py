"""Two aiortc peers on this host, for tests of our aiortc subclasses
(delayed SACKs, bundling, consent): created, negotiated and closed in one place."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any


@contextlib.asynccontextmanager
async def peer_pair() -> AsyncIterator[tuple[Any, Any]]:
    """Two peer connections with no ICE servers; both closed on the way out."""
    from aiortc import RTCConfiguration, RTCPeerConnection

    a = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    b = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def negotiate(a: Any, b: Any, on_offer: Callable[[Any], None] | None = None) -> None:
    """Offer from ``a``, answer from ``b``; ``on_offer(b)`` runs once ``b`` has its
    association and before any DATA moves (where our class swaps go)."""
    await a.setLocalDescription(await a.createOffer())
    await b.setRemoteDescription(a.localDescription)
    if on_offer is not None:
        on_offer(b)
    await b.setLocalDescription(await b.createAnswer())
    await a.setRemoteDescription(b.localDescription)


def collect(b: Any, count: int) -> tuple[list[bytes], asyncio.Event]:
    """Every message ``b`` receives on the channel ``a`` opens, and an event set
    when ``count`` have arrived."""
    got: list[bytes] = []
    done = asyncio.Event()

    @b.on("datachannel")
    def _on(channel: Any) -> None:
        @channel.on("message")
        def _message(msg: Any) -> None:
            got.append(msg)
            if len(got) >= count:
                done.set()

    return got, done
