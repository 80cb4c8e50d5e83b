"""The client's side of Turbo Tunnel: one long-lived session over a sequence of
short-lived carriers (docs/transports/turbotunnel.md §5; Tor's ``RedialPacketConn``).

A *carrier* is one proxy connection (a WebRTC data channel, or a WebSocket in
tests): something that sends and receives messages. :class:`TurboTunnelSession`
owns a random ClientID, a KCP conversation with a random conv and an smux
client session. Its redial loop takes a carrier from ``dial``, writes the
token and the ClientID as two messages, then moves KCP packets both ways until
the carrier fails, and dials again with the same ClientID. Packets KCP emits
while no carrier is up wait in a 512-packet queue (dropped when full; KCP
retransmits), so the smux streams above survive a change of proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from transports.base import Streams

from . import TOKEN, encapsulation, kcp, smux
from .streams import as_streams

QUEUE_LEN = 512
MAX_MESSAGE = 16 * 1024
CLIENT_KEEPALIVE_TIMEOUT_S = 600.0

log = logging.getLogger(__name__)


class Carrier(Protocol):
    """One proxy connection, message-oriented and reliable while it lasts."""

    async def send(self, data: bytes) -> None: ...
    async def recv(self) -> bytes | None: ...  # None once it has failed or closed
    async def close(self) -> None: ...


Dial = Callable[[], Awaitable[Carrier]]


@dataclass
class RedialStats:
    carriers: int = 0
    dial_failures: int = 0
    dropped: int = 0
    # (time the previous carrier failed, time the next one was ready), seconds.
    gaps: list[tuple[float, float]] = field(default_factory=list)


class TurboTunnelSession:
    """ClientID + KCP + smux over whichever carrier ``dial`` hands out next."""

    def __init__(self, dial: Dial, *, queue_len: int = QUEUE_LEN,
                 keepalive_timeout_s: float = CLIENT_KEEPALIVE_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client_id = os.urandom(8)
        self._dial = dial
        self._clock = clock
        self.stats = RedialStats()
        self._outgoing: asyncio.Queue[bytes] = asyncio.Queue(queue_len)
        conv = int.from_bytes(os.urandom(4), "little")
        self.kcp = kcp.KCPConn(conv, self._enqueue, clock=clock)
        self.smux = smux.Session(self.kcp, client=True,
                                 config=smux.Config(keepalive_timeout_s=keepalive_timeout_s))
        self._task: asyncio.Task[None] | None = None
        self.carrier: Carrier | None = None
        self.closed = False

    def start(self) -> TurboTunnelSession:
        self.smux.start()
        self._task = asyncio.create_task(self._redial_loop())
        return self

    def _enqueue(self, packet: bytes) -> None:
        try:
            self._outgoing.put_nowait(packet)
        except asyncio.QueueFull:
            self.stats.dropped += 1

    async def open_stream(self, on_close: Callable[[], object] | None = None) -> Streams:
        """A new smux stream as asyncio streams (``on_close`` runs when it is done)."""
        return as_streams(await self.smux.open_stream(), on_close=on_close)

    async def _redial_loop(self) -> None:
        failed_at: float | None = None
        while not self.closed and not self.smux.closed:
            try:
                carrier = await self._dial()
            except Exception as exc:  # noqa: BLE001 - any dial failure means "try again"
                self.stats.dial_failures += 1
                log.info("dial failed: %s", exc)
                await asyncio.sleep(1.0)
                continue
            try:
                await carrier.send(TOKEN)
                await carrier.send(self.client_id)
            except Exception as exc:  # noqa: BLE001
                log.info("carrier failed during the preamble: %s", exc)
                await carrier.close()
                continue
            self.stats.carriers += 1
            if failed_at is not None:
                self.stats.gaps.append((failed_at, self._clock()))
            self.carrier = carrier
            try:
                await self._run(carrier)
            finally:
                self.carrier = None
                failed_at = self._clock()
                with contextlib.suppress(Exception):
                    await carrier.close()

    async def _run(self, carrier: Carrier) -> None:
        up = asyncio.create_task(self._up(carrier))
        down = asyncio.create_task(self._down(carrier))
        try:
            await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (up, down):
                t.cancel()
            await asyncio.gather(up, down, return_exceptions=True)

    async def _up(self, carrier: Carrier) -> None:
        queue = self._outgoing
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                packet = await queue.get()
                out = bytearray(encapsulation.encode(packet))
                while not queue.empty() and len(out) < MAX_MESSAGE - 1500:
                    out += encapsulation.encode(queue.get_nowait())
                await carrier.send(bytes(out))

    async def _down(self, carrier: Carrier) -> None:
        decoder = encapsulation.Decoder()
        try:
            while (data := await carrier.recv()) is not None:
                self.kcp.input(decoder.feed(data))
        except encapsulation.EncapsulationError as exc:
            log.info("bad encapsulation from the carrier: %s", exc)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self.smux.close()  # closes the KCP conversation under it
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.carrier is not None:
            with contextlib.suppress(Exception):
                await self.carrier.close()
