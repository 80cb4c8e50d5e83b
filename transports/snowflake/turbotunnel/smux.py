"""smux protocol version 2, as Snowflake runs it inside KCP (xtaci/smux;
docs/transports/turbotunnel.md §4).

Frames have an 8-byte little-endian header, ``ver | cmd | length u16 | sid u32``:
SYN opens a stream, FIN closes one direction, PSH carries data, NOP is a
keepalive, and UPD (v2 only) carries ``consumed u32 | window u32``, the
receiver's flow control. Client stream IDs are odd and start at 3, server IDs
even from 2. A reader announces what it has consumed after its first read and
then every ``max_stream_buffer / 2`` bytes; a writer keeps
``written - peer_consumed`` below the peer's window (initially 262144).
Frames for a stream that is already gone are dropped, as smux does, because
they are normal after a local close. A bad version or command ends the
session with :class:`SmuxError`.

The session runs over anything with ``async read() -> bytes`` (``b""`` at end)
and ``async write(bytes)``: a KCP stream in Snowflake, a pipe in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from dataclasses import dataclass
from typing import Protocol

SYN, FIN, PSH, NOP, UPD = range(5)
HEADER = struct.Struct("<BBHI")
INITIAL_PEER_WINDOW = 262144


class SmuxError(Exception):
    """The session is over: bad input from the peer, a keepalive timeout, or closed."""


class ByteConn(Protocol):
    async def read(self) -> bytes: ...
    async def write(self, data: bytes) -> None: ...


@dataclass
class Config:
    """smux's DefaultConfig with Snowflake's changes: version 2 and a 1 MiB stream
    buffer. Tor's keepalive timeouts are 10 min (client) and 4 min (server)."""

    version: int = 2
    keepalive_interval_s: float = 10.0
    keepalive_timeout_s: float = 600.0
    max_frame_size: int = 32768
    max_stream_buffer: int = 1048576


@dataclass(frozen=True)
class Frame:
    version: int
    cmd: int
    sid: int
    data: bytes = b""

    def pack(self) -> bytes:
        return HEADER.pack(self.version, self.cmd, len(self.data), self.sid) + self.data


class FrameDecoder:
    """Frames from a byte stream split anywhere."""

    def __init__(self, version: int) -> None:
        self.version = version
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        out = []
        while len(self._buf) >= HEADER.size:
            ver, cmd, length, sid = HEADER.unpack_from(self._buf)
            if ver != self.version:
                raise SmuxError(f"frame version {ver}, expected {self.version}")
            if cmd > UPD or (cmd == UPD and self.version < 2):
                raise SmuxError(f"unknown command {cmd}")
            if cmd == UPD and length != 8:
                raise SmuxError("UPD frame must carry 8 bytes")
            if len(self._buf) < HEADER.size + length:
                break
            out.append(Frame(ver, cmd, sid, bytes(self._buf[8:8 + length])))
            del self._buf[:8 + length]
        return out


class Stream:
    """One bidirectional byte stream of a :class:`Session`."""

    def __init__(self, session: Session, sid: int) -> None:
        self.session, self.sid = session, sid
        self._buf = bytearray()
        self._readable = asyncio.Event()
        self._fin = False  # the peer closed its side
        self._closed = False  # we closed ours
        self.num_read = 0
        self._incr = 0
        self.num_written = 0
        self.peer_consumed = 0
        self.peer_window = INITIAL_PEER_WINDOW
        self._writable = asyncio.Event()
        self._writable.set()

    async def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes; ``b""`` once the peer has closed and all is read."""
        while not self._buf:
            if self._fin or self.session.closed:
                return b""
            self._readable.clear()
            await self._readable.wait()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        self.num_read += len(data)
        self._incr += len(data)
        cfg = self.session.config
        if cfg.version >= 2 and (self._incr >= cfg.max_stream_buffer // 2
                                 or self.num_read == len(data)):
            self._incr = 0
            await self.session._send(UPD, self.sid, struct.pack(
                "<II", self.num_read & 0xFFFFFFFF, cfg.max_stream_buffer))
        return data

    async def readexactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = await self.read(n - len(out))
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(out), n)
            out += chunk
        return bytes(out)

    async def write(self, data: bytes) -> None:
        """Send all of ``data``, waiting for the peer's window in v2."""
        cfg = self.session.config
        view = memoryview(data)
        while view:
            if self._closed or self.session.closed:
                raise SmuxError("write on a closed stream")
            room = len(view)
            if cfg.version >= 2:
                inflight = (self.num_written - self.peer_consumed) & 0xFFFFFFFF  # u32, as Go
                room = min(room, self.peer_window - inflight)
                if room <= 0:
                    self._writable.clear()
                    await self._writable.wait()
                    continue
            chunk = bytes(view[:min(room, cfg.max_frame_size)])
            await self.session._send(PSH, self.sid, chunk)
            self.num_written += len(chunk)
            view = view[len(chunk):]

    async def close(self) -> None:
        """Send FIN: no more writes. Reading goes on until the peer's FIN (a
        half-close; Go's smux simply sees EOF). The stream leaves the session
        once both sides are closed, and late frames for it are then dropped."""
        if self._closed:
            return
        self._closed = True
        if self._fin:
            self.session._streams.pop(self.sid, None)
        if not self.session.closed:
            await self.session._send(FIN, self.sid)

    # -- called by the session -----------------------------------------------------------

    def _push(self, data: bytes) -> None:
        self._buf += data
        self._readable.set()

    def _peer_fin(self) -> None:
        self._fin = True
        self._readable.set()
        if self._closed:
            self.session._streams.pop(self.sid, None)

    def _update(self, consumed: int, window: int) -> None:
        self.peer_consumed, self.peer_window = consumed, window
        self._writable.set()

    def _session_closed(self) -> None:
        self._readable.set()
        self._writable.set()


class Session:
    """A smux session; :meth:`start` runs its receive and keepalive loops."""

    def __init__(self, conn: ByteConn, *, client: bool, config: Config | None = None) -> None:
        self.conn, self.client = conn, client
        self.config = config or Config()
        self._decoder = FrameDecoder(self.config.version)
        self._streams: dict[int, Stream] = {}
        self._accept: asyncio.Queue[Stream | None] = asyncio.Queue()
        self._next_sid = 1 if client else 0
        self._write_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self.closed = False
        self.error: SmuxError | None = None
        self.last_recv = time.monotonic()

    def start(self) -> Session:
        self._tasks = [asyncio.create_task(self._recv_loop()),
                       asyncio.create_task(self._keepalive())]
        return self

    async def open_stream(self) -> Stream:
        if self.closed:
            raise SmuxError("session closed")
        self._next_sid += 2
        stream = Stream(self, self._next_sid)
        self._streams[stream.sid] = stream
        await self._send(SYN, stream.sid)
        return stream

    async def accept_stream(self) -> Stream:
        """The next stream the peer opened; SmuxError once the session is over."""
        stream = await self._accept.get()
        if stream is None:
            self._accept.put_nowait(None)  # wake every other waiter too
            raise self.error or SmuxError("session closed")
        return stream

    async def close(self, error: SmuxError | None = None) -> None:
        if self.closed:
            return
        self.closed, self.error = True, error
        for s in list(self._streams.values()):
            s._session_closed()
        self._accept.put_nowait(None)
        current = asyncio.current_task()
        for t in self._tasks:
            if t is not current:
                t.cancel()
        close = getattr(self.conn, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                result = close()
                if asyncio.iscoroutine(result):
                    await result

    async def _send(self, cmd: int, sid: int, data: bytes = b"") -> None:
        if self.closed:
            raise self.error or SmuxError("session closed")
        async with self._write_lock:
            await self.conn.write(Frame(self.config.version, cmd, sid, data).pack())

    async def _recv_loop(self) -> None:
        try:
            while True:
                data = await self.conn.read()
                if not data:
                    await self.close(SmuxError("connection closed by the peer"))
                    return
                self.last_recv = time.monotonic()
                for f in self._decoder.feed(data):
                    self._dispatch(f)
        except SmuxError as exc:
            await self.close(exc)
        except (OSError, ConnectionError) as exc:
            await self.close(SmuxError(f"connection failed: {exc}"))

    def _dispatch(self, f: Frame) -> None:
        stream = self._streams.get(f.sid)
        if f.cmd == SYN:
            if stream is None:
                stream = Stream(self, f.sid)
                self._streams[f.sid] = stream
                self._accept.put_nowait(stream)
        elif f.cmd == PSH:
            if stream is not None and f.data:
                stream._push(f.data)
        elif f.cmd == FIN:
            if stream is not None:
                stream._peer_fin()
        elif f.cmd == UPD:
            if stream is not None:
                stream._update(*struct.unpack("<II", f.data))

    async def _keepalive(self) -> None:
        cfg = self.config
        with contextlib.suppress(SmuxError):
            while not self.closed:
                await asyncio.sleep(cfg.keepalive_interval_s)
                if time.monotonic() - self.last_recv > cfg.keepalive_timeout_s:
                    await self.close(SmuxError("keepalive timeout"))
                    return
                await self._send(NOP, 0)
