"""Carriers for a Turbo Tunnel session (see :mod:`.turbotunnel.redial`).

* :class:`DataChannelCarrier`: an aiortc data channel to a Snowflake proxy, the
  real path. It fails when the channel closes or when nothing has arrived for
  ``stale_s`` (Tor's ``SnowflakeTimeout``, 20 s);
* :class:`WebSocketCarrier`: a WebSocket straight to a bridge, the hop a proxy
  makes. Tests and benchmarks use it to take WebRTC out of the measurement.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from .datachannel import ChannelSender

SNOWFLAKE_TIMEOUT_S = 20.0


class WebSocketCarrier:
    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse,
                 own_session: bool) -> None:
        self._session, self._ws, self._own = session, ws, own_session

    @classmethod
    async def connect(cls, url: str, session: aiohttp.ClientSession | None = None
                      ) -> WebSocketCarrier:
        own = session is None
        s = session or aiohttp.ClientSession()
        try:
            ws = await s.ws_connect(url, max_msg_size=1 << 20, autoping=True)
        except BaseException:
            if own:
                await s.close()
            raise
        return cls(s, ws, own)

    async def send(self, data: bytes) -> None:
        await self._ws.send_bytes(data)

    async def recv(self) -> bytes | None:
        msg = await self._ws.receive()
        if msg.type == aiohttp.WSMsgType.BINARY:
            return msg.data
        if msg.type == aiohttp.WSMsgType.TEXT:
            return msg.data.encode()
        return None

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._ws.close()
        if self._own:
            await self._session.close()


class DataChannelCarrier:
    """An open aiortc data channel (and its peer connection) as a carrier."""

    def __init__(self, pc: Any, channel: Any, *, stale_s: float = SNOWFLAKE_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pc, self.channel = pc, channel
        self._sender = ChannelSender(channel)
        self.stale_s = stale_s
        self._clock = clock
        self._inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.last_recv = clock()
        self.closed = False
        # Called once with the carrier when it closes (the peer pool's bookkeeping).
        self.on_close: Callable[[DataChannelCarrier], None] | None = None
        self.bytes_in = 0

        @channel.on("message")
        def _message(msg: Any) -> None:
            data = msg.encode() if isinstance(msg, str) else bytes(msg)
            self.last_recv = self._clock()
            self.bytes_in += len(data)
            self._inbox.put_nowait(data)

        @channel.on("close")
        def _closed() -> None:
            self._inbox.put_nowait(None)

        @pc.on("connectionstatechange")
        def _state() -> None:
            if pc.connectionState in ("failed", "closed"):
                self._inbox.put_nowait(None)

    async def send(self, data: bytes) -> None:
        if self.closed:
            raise ConnectionError("data channel is closed")
        await self._sender.send(data)

    async def recv(self) -> bytes | None:
        while True:
            if self.closed:
                return None
            remaining = self.stale_s - (self._clock() - self.last_recv)
            if remaining <= 0:
                return None  # stale: Tor closes a peer silent for 20 s
            try:
                return await asyncio.wait_for(self._inbox.get(), min(remaining, 1.0))
            except TimeoutError:
                continue

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._inbox.put_nowait(None)
        with contextlib.suppress(Exception):
            await self.pc.close()
        if self.on_close is not None:
            self.on_close(self)
