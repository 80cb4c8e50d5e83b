"""An smux stream as an asyncio (StreamReader, StreamWriter) pair.

Everything above a transport in ptlab (the SOCKS front, ``relay``, the PT
ORPort handoff) speaks asyncio streams, so both ends of Snowflake hand their
smux streams over in that shape. A small ``asyncio.Transport`` pumps bytes:
reads go into a ``StreamReaderProtocol`` (honouring its pause/resume), and
writes queue for a writer task that awaits smux's flow control, pausing the
protocol (so ``drain()`` waits) above ``high_water`` queued bytes
(``HIGH_WATER`` by default; the bridge passes 0, so one write is queued at a
time and a meter, :mod:`.clientbuffer`, counts it until smux has taken it).
``write_eof`` and ``close`` send smux's FIN once the queue is written.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable

from transports.base import Streams

from .clientbuffer import Meter
from .smux import SmuxError, Stream

# Bytes a stream's transport queues before the writer waits: smux's window and
# KCP's queue do the pipelining, and a thousand unread streams on a bridge each
# hold this much (docs/transports/budgets.md §2).
HIGH_WATER = 64 * 1024
LOW_WATER = 16 * 1024


class SmuxTransport(asyncio.Transport):
    def __init__(self, stream: Stream, protocol: asyncio.StreamReaderProtocol,
                 extra: dict | None = None,
                 on_close: Callable[[], object] | None = None, *,
                 high_water: int = HIGH_WATER, meter: Meter | None = None) -> None:
        super().__init__(extra)
        self._on_close = on_close
        self._high_water = high_water
        self._low_water = min(LOW_WATER, high_water)
        self._meter = meter
        self._stream = stream
        self._protocol = protocol
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._wake = asyncio.Event()
        self._reading = asyncio.Event()
        self._reading.set()
        self._eof = False
        self._closing = False
        self._paused = False
        self._finished = False
        loop = asyncio.get_running_loop()
        self._reader_task = loop.create_task(self._pump_in())
        self._writer_task = loop.create_task(self._pump_out())

    async def _pump_in(self) -> None:
        exc: Exception | None = None
        try:
            while True:
                await self._reading.wait()
                data = await self._stream.read()
                if not data:
                    break
                self._protocol.data_received(data)
            self._protocol.eof_received()
        except (SmuxError, ConnectionError) as e:
            exc = e
        except asyncio.CancelledError:
            return
        if exc is not None:
            self._finish(exc)

    async def _pump_out(self) -> None:
        try:
            while True:
                while not self._queue:
                    if self._eof or self._closing:
                        await self._stream.close()
                        if self._closing:
                            self._finish(None)
                        return
                    self._wake.clear()
                    await self._wake.wait()
                data = self._queue[0]
                await self._stream.write(data)
                self._queue.popleft()
                self._queued -= len(data)
                if self._meter is not None:
                    self._meter.add(-len(data))
                if self._paused and self._queued <= self._low_water:
                    self._paused = False
                    self._protocol.resume_writing()
        except (SmuxError, ConnectionError) as e:
            self._finish(e)
        except asyncio.CancelledError:
            pass

    def _finish(self, exc: Exception | None) -> None:
        if self._finished:
            return
        self._finished = True
        self._closing = True
        self._reader_task.cancel()
        if self._meter is not None:
            self._meter.clear()
        self._wake.set()
        if isinstance(exc, SmuxError):
            # What an asyncio stream's user expects of a connection that failed
            # (relay ends quietly on it); the session's own error says why.
            exc = ConnectionResetError(f"smux: {exc}")
        with contextlib.suppress(Exception):
            self._protocol.connection_lost(exc)
        if self._on_close is not None:
            self._on_close()

    # -- asyncio.Transport --------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof or self._closing:
            raise ConnectionResetError("smux stream is closed for writing")
        if not data:
            return
        self._queue.append(bytes(data))
        self._queued += len(data)
        if self._meter is not None:
            self._meter.add(len(data))
        self._wake.set()
        if not self._paused and self._queued > self._high_water:
            self._paused = True
            self._protocol.pause_writing()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self._eof = True
        self._wake.set()

    def get_write_buffer_size(self) -> int:
        return self._queued

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    def is_reading(self) -> bool:
        return self._reading.is_set()

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._wake.set()
        if self._writer_task.done():
            self._finish(None)

    def abort(self) -> None:
        self._queue.clear()
        self._queued = 0
        if self._meter is not None:
            self._meter.clear()
        self._writer_task.cancel()
        self._closing = True
        asyncio.get_running_loop().create_task(self._close_stream())
        self._finish(None)

    async def _close_stream(self) -> None:
        # The FIN goes out if the session still can; a session already gone is the
        # reason for many an abort, and nobody waits for this task's result.
        with contextlib.suppress(SmuxError, ConnectionError):
            await self._stream.close()

    def is_closing(self) -> bool:
        return self._closing or self._eof


def as_streams(stream: Stream, extra: dict | None = None,
               on_close: Callable[[], object] | None = None, *,
               high_water: int = HIGH_WATER, meter: Meter | None = None) -> Streams:
    """Wrap an smux stream; ``extra`` answers ``get_extra_info`` (e.g. peername);
    ``on_close`` runs once the wrapped stream is finished; ``drain()`` waits above
    ``high_water`` queued bytes, which ``meter`` counts."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2 ** 20)
    protocol = asyncio.StreamReaderProtocol(reader)
    transport = SmuxTransport(stream, protocol, extra, on_close, high_water=high_water,
                              meter=meter)
    protocol.connection_made(transport)
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    return reader, writer
