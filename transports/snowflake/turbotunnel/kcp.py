"""KCP as Snowflake configures kcp-go, driven from asyncio
(docs/transports/turbotunnel.md §3.2, §3.4).

The protocol engine is ``siokcp`` (a sans-io binding of ikcp.c), which is
wire-compatible with kcp-go without crypto or FEC. This module only drives it:

* settings: stream mode, windows 65535/65535, interval 10 ms (kcp-go clamps
  Snowflake's 0 to 10), no fast resend, no congestion window, MTU 1400, and a
  100 ms minimum RTO: Snowflake's ``SetNoDelay(0, 0, 0, 1)``;
* one local difference: kcp-go backs the RTO off *additively* (``rto +=
  rx_rto`` per retry, docs/transports/turbotunnel.md §3.3) where ikcp.c with nodelay 0 doubles
  it, which after a 20 s proxy outage would add tens of seconds of stall. We
  ask ikcp for its additive back-off (nodelay 2: ``rto += rx_rto / 2``) and
  put the minimum RTO back to 100 ms. None of this is visible on the wire;
* input comes in *batches* (every packet of one carrier message, then one
  drain and one flush), because a flush per packet costs 3-5x in throughput;
* writes are cut to 64 KiB, since ikcp refuses one ``send`` that needs 128 or
  more segments, and wait while more than ``HIGH_WATER`` segments are unsent;
* received bytes are pulled out of KCP only while less than ``READ_BUFFER`` is
  waiting to be read, so KCP's own receive window still pushes back on a peer
  whose reader has stalled;
* one timer task calls ``update`` every interval; the clock is injectable.

Each output packet goes to ``send_packet`` as one ``bytes``: one encapsulated
chunk on the carrier, exactly what kcp-go's ``WriteTo`` gets.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Iterable

from siokcp import KCPConnection, getconv

MTU = 1400
WINDOW = 65535
INTERVAL_MS = 10
MIN_RTO_MS = 100
SEND_CHUNK = 65536
HIGH_WATER = 2048
READ_BUFFER = 4 * 1048576
HEADER_LEN = 24

Clock = Callable[[], float]


class KCPClosed(ConnectionError):
    """The KCP conversation was closed locally."""


def conversation_of(packet: bytes) -> int:
    """The conv of a KCP packet (its first four bytes, little-endian)."""
    if len(packet) < HEADER_LEN:
        raise ValueError(f"a KCP packet has at least {HEADER_LEN} bytes, got {len(packet)}")
    return getconv(packet)


def first_sn(packet: bytes) -> int:
    """The sequence number of a packet's first segment (kcp-go replaces a session
    only when a new conv arrives with sn 0)."""
    if len(packet) < HEADER_LEN:
        raise ValueError(f"a KCP packet has at least {HEADER_LEN} bytes, got {len(packet)}")
    return int.from_bytes(packet[12:16], "little")


class KCPConn:
    """One KCP conversation as a byte stream: ``read()``/``write()``/``close()``."""

    def __init__(self, conv: int, send_packet: Callable[[bytes], object], *,
                 clock: Clock = time.monotonic, interval_ms: int = INTERVAL_MS) -> None:
        self.conv = conv
        self._send_packet = send_packet
        self._clock = clock
        self._kcp = KCPConnection(conv, self._output, lambda _msg: None)
        self._kcp.stream = 1
        self._kcp.wndsize(WINDOW, WINDOW)
        self._kcp.nodelay(2, interval_ms, 0, 1)
        self._kcp.rx_minrto = MIN_RTO_MS
        self._kcp.setmtu(MTU)
        self._interval = interval_ms / 1000
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = False
        self._flush_pending = False
        self.packets_in = 0
        self.packets_out = 0
        self._kcp.update(self._now())
        self._timer = asyncio.get_running_loop().create_task(self._tick())

    # -- packets in and out -------------------------------------------------
    def _now(self) -> int:
        return int(self._clock() * 1000) & 0xFFFFFFFF

    def _output(self, packet: bytes) -> int:
        self.packets_out += 1
        self._send_packet(packet)
        return 0

    def input(self, packets: Iterable[bytes]) -> int:
        """Feed a batch of packets from the carrier; the number KCP accepted."""
        if self._closed:
            return 0
        accepted = 0
        for p in packets:
            self.packets_in += 1
            if len(p) >= HEADER_LEN and self._kcp.receive_data(p) == 0:
                accepted += 1
        self._drain()
        self._kcp.current = self._now()
        self._kcp.flush()
        self._update_writable()
        return accepted

    def _drain(self) -> None:
        while self._buffered < READ_BUFFER:
            data = self._kcp.next_event()
            if not data:
                break
            self._chunks.append(data)
            self._buffered += len(data)
        if self._chunks:
            self._readable.set()

    def _update_writable(self) -> None:
        if self._kcp.waitsnd() <= HIGH_WATER:
            self._writable.set()
        else:
            self._writable.clear()

    async def _tick(self) -> None:
        while not self._closed:
            self._kcp.update(self._now())
            self._update_writable()
            await asyncio.sleep(self._interval)

    def _schedule_flush(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        if not self._closed:
            self._kcp.current = self._now()
            self._kcp.flush()

    # -- the byte stream ----------------------------------------------------
    async def read(self) -> bytes:
        """The next received bytes; ``b""`` once closed."""
        while not self._chunks:
            if self._closed:
                return b""
            self._readable.clear()
            self._drain()
            if self._chunks:
                break
            await self._readable.wait()
        data = b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        before = self._kcp.nrcv_que
        self._drain()
        if before and self._kcp.nrcv_que < before:
            # We freed receive-queue space: tell the peer its window opened.
            self._schedule_flush()
        return data

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        for start in range(0, len(view), SEND_CHUNK):
            while not self._writable.is_set():
                if self._closed:
                    break
                await self._writable.wait()
            if self._closed:
                raise KCPClosed("KCP conversation closed")
            self._kcp.send(view[start:start + SEND_CHUNK])
            self._update_writable()
        self._schedule_flush()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def unsent(self) -> int:
        """Segments queued or in flight (``waitsnd``)."""
        return self._kcp.waitsnd()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._readable.set()
        self._writable.set()
        self._timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._timer
