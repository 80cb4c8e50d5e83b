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
  more segments, and wait while more than ``HIGH_WATER`` segments are unsent,
  or while ``may_send`` (the bridge's client buffer, :mod:`.clientbuffer`)
  refuses the bytes they would add; a ``meter`` is told what the unacknowledged
  segments hold (``MTU`` bytes each, at most);
* the time of the last acknowledgement is kept while data is unacknowledged
  (:meth:`KCPConn.stalled_for`): a client that reads nothing never acknowledges;
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

from .clientbuffer import Meter

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
                 clock: Clock = time.monotonic, interval_ms: int = INTERVAL_MS,
                 meter: Meter | None = None,
                 may_send: Callable[[int], bool] | None = None) -> None:
        self.conv = conv
        self._meter = meter
        self._may_send = may_send
        self._want = 0  # the cost of the write waiting for room, if one is
        self.last_progress = clock()  # the last ACK, or the start of unacked data
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
        unacked, una = self._kcp.waitsnd(), self._kcp.snd_una
        for p in packets:
            self.packets_in += 1
            if len(p) >= HEADER_LEN and self._kcp.receive_data(p) == 0:
                accepted += 1
        if self._kcp.snd_una != una or self._kcp.waitsnd() < unacked:
            self.last_progress = self._clock()
        self._drain()
        self._kcp.current = self._now()
        self._kcp.flush()
        self._account()
        self._update_writable()
        return accepted

    def _account(self) -> None:
        if self._meter is not None and not self._closed:
            self._meter.set(self._kcp.waitsnd() * MTU)

    def stalled_for(self, now: float) -> float:
        """Seconds since the peer last acknowledged anything, while data waits
        for its acknowledgement; 0 when nothing does."""
        if self._closed or self._kcp.waitsnd() == 0:
            return 0.0
        return max(0.0, now - self.last_progress)

    def _drain(self) -> None:
        while self._buffered < READ_BUFFER and not self._closed:
            data = self._kcp.next_event()
            if not data:
                break
            self._chunks.append(data)
            self._buffered += len(data)
        if self._chunks:
            self._readable.set()

    def _can_send(self, cost: int) -> bool:
        if self._kcp.waitsnd() > HIGH_WATER:
            return False
        return self._may_send is None or self._may_send(cost)

    def _update_writable(self) -> None:
        # Asked only for a writer that waits: may_send may end another session to
        # make room, which must not happen for nobody.
        if self._closed or not self._want or self._can_send(self._want):
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
        if self._closed:
            return data
        before = self._kcp.nrcv_que
        self._drain()
        if before and self._kcp.nrcv_que < before:
            # We freed receive-queue space: tell the peer its window opened.
            self._schedule_flush()
        return data

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        for start in range(0, len(view), SEND_CHUNK):
            chunk = view[start:start + SEND_CHUNK]
            cost = -(-len(chunk) // self.mss) * MTU  # whole segments, as metered
            try:
                while not self._closed and not self._can_send(cost):
                    self._want = cost
                    self._writable.clear()
                    await self._writable.wait()
            finally:
                self._want = 0
            if self._closed:
                raise KCPClosed("KCP conversation closed")
            if self._kcp.waitsnd() == 0:
                self.last_progress = self._clock()  # the wait for an ACK starts now
            self._kcp.send(chunk)
            self._account()
        self._schedule_flush()

    @property
    def mss(self) -> int:
        return MTU - HEADER_LEN

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def unsent(self) -> int:
        """Segments queued or in flight (``waitsnd``)."""
        return 0 if self._closed else self._kcp.waitsnd()

    def shut(self) -> None:
        """Close now: no more reads or writes, nothing held (:meth:`close` also
        waits for the timer task to end)."""
        if self._closed:
            return
        self._closed = True
        self._readable.set()
        self._writable.set()
        self._timer.cancel()
        if self._meter is not None:
            self._meter.clear()
        # ikcp frees its segments only when the conversation object goes, and it
        # holds our output callback (a cycle): drop it now, not at some later
        # garbage collection. Every use of it is behind ``_closed``.
        del self._kcp

    async def close(self) -> None:
        self.shut()
        with contextlib.suppress(asyncio.CancelledError):
            await self._timer
