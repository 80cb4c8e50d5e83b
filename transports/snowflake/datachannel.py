"""Sending on an aiortc data channel with back-pressure.

aiortc's ``RTCDataChannel.send`` queues without limit, so a fast sender (a
bridge pushing downstream, or KCP on the client) would grow memory instead of
feeling the path's speed. :class:`ChannelSender` waits, after a send that
leaves more than ``high`` bytes buffered, until aiortc reports the buffer
below ``low`` (its ``bufferedamountlow`` event), as a browser app would.
"""

from __future__ import annotations

import asyncio
from typing import Any

HIGH_WATER = 1 << 20
LOW_WATER = 256 * 1024


class ChannelSender:
    def __init__(self, channel: Any, high: int = HIGH_WATER, low: int = LOW_WATER) -> None:
        self.channel, self.high = channel, high
        channel.bufferedAmountLowThreshold = low
        self._drained = asyncio.Event()
        self._drained.set()
        channel.on("bufferedamountlow", self._drained.set)
        channel.on("close", self._drained.set)

    async def send(self, data: bytes) -> None:
        if self.channel.readyState != "open":
            raise ConnectionError("data channel is not open")
        self.channel.send(data)
        if self.channel.bufferedAmount > self.high:
            # The buffer drains only from the event loop, so nothing is missed
            # between this check and the wait.
            self._drained.clear()
            await self._drained.wait()
