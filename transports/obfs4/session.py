"""An established obfs4 session as asyncio streams.

After the handshake, the raw TCP transport is handed to :class:`Obfs4Protocol`,
which decodes frames straight into the application's ``StreamReader`` and
encodes the application's writes (through :class:`Obfs4Transport`) into
frames, with obfs4proxy's per-burst padding and iat-modes:

- iat-mode 0: one write per burst, padded once (``padBurst``).
- iat-mode 1: the padded burst goes out in chunks of at most one segment,
  each followed by a sleep of ``iatDist.sample() × 100 µs``.
- iat-mode 2: each chunk's length is a fresh ``lenDist`` sample, padding is
  added when the buffered data falls short, and each chunk is followed by the
  same sleep.

There is no half-close in obfs4: EOF from the application (``write_eof``)
closes the session, after what is queued has gone out, as obfs4proxy's copy
loop closes both ends when one direction ends. The socket itself closes
gracefully ("lingering close", as HTTP servers do): once our data has gone
out we send a FIN, then read and discard whatever the peer still sends until
its FIN, or for at most ``LINGER_S``. Closing at once would lose data: the
peer may still have bytes in flight (the padding frames of a burst whose
first segment we have already acted on, say), and Linux answers data that
reaches a closed socket, or sits unread in one when it closes, with a RST,
which throws away the response still queued in our kernel send buffer (and
the peer's own unread receive buffer). A frame that fails
authentication ends the session at once (only a peer that completed the
handshake can get here): the application's reader gets what decoded before
it, then EOF.

Speed: the raw socket is read with ``recv_into`` straight into one receive
buffer per session (``asyncio.BufferedProtocol``), frames are opened in place
there and only the payloads are copied out, once; writes are framed into one
fresh ``bytearray`` per burst that goes to the socket as is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

from ..base import Streams
from ..common.probdist import WeightedDist, iat_seed
from .framing import MAXIMUM_SEGMENT_LENGTH, Decoder, Encoder, FramingError
from .packet import PacketDecoder, PacketEncoder, burst_pad_length

IAT_NONE, IAT_ENABLED, IAT_PARANOID = 0, 1, 2
MAX_IAT_DELAY = 100  # samples are in units of 100 µs: at most 10 ms
IAT_UNIT_S = 100e-6
MAX_ZERO_DRAWS = 64  # iat-mode 2: consecutive 0-length draws before a full segment
READER_LIMIT = 1 << 20
# The receive buffer: what one recv_into may fill (asyncio's own socket reads
# are 256 KiB), plus room for the partial frame carried over.
RECV_SIZE = 256 * 1024
RECV_BUFFER = RECV_SIZE + 2 * MAXIMUM_SEGMENT_LENGTH
# The raw socket's write-buffer high-water mark (asyncio's default is 64 KiB):
# fewer pause/resume rounds for a relay writing 64 KiB bursts (~10 % less CPU
# per GB on loopback); low-water is asyncio's high // 4.
WRITE_HIGH_WATER = 512 * 1024
# The IAT queue pauses the application above this and resumes it below the low
# mark: at ~0.2 MB/s of paced output, 64 KiB is a third of a second.
PACED_HIGH_WATER, PACED_LOW_WATER = 64 * 1024, 16 * 1024
# After our FIN, how long to wait for the peer's before closing the socket anyway.
LINGER_S = 10.0


@dataclass
class Shaping:
    """Length (and, for iat-modes 1 and 2, timing) distributions of one side."""

    iat_mode: int
    len_dist: WeightedDist
    iat_dist: WeightedDist | None

    @classmethod
    def from_seed(cls, seed: bytes, iat_mode: int) -> Shaping:
        biased = False  # obfs4proxy's default (the -obfs4-distBias flag is off)
        lens = WeightedDist(seed, 0, MAXIMUM_SEGMENT_LENGTH, biased)
        iats = (WeightedDist(iat_seed(seed), 0, MAX_IAT_DELAY, biased)
                if iat_mode != IAT_NONE else None)
        return cls(iat_mode, lens, iats)

    def reseed(self, seed: bytes) -> None:
        """The server's PRNG-seed packet: the client mimics the server's shape."""
        self.len_dist.reset(seed)
        if self.iat_dist is not None:
            self.iat_dist.reset(iat_seed(seed))


class Obfs4Transport(asyncio.Transport):
    """What the application writes to: encodes into frames on the raw transport."""

    def __init__(self, proto: Obfs4Protocol) -> None:
        super().__init__()
        self._p = proto

    # -- writing ---------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data or self._p.closing:
            return
        self._p.send(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        """obfs4 has no half-close: the end of our data ends the session (as obfs4proxy)."""
        self._p.close()

    def get_write_buffer_size(self) -> int:
        return self._p.raw.get_write_buffer_size() + self._p.queued

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._p.raw.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._p.raw.set_write_buffer_limits(high, low)

    # -- reading ---------------------------------------------------------------
    def pause_reading(self) -> None:
        self._p.raw.pause_reading()

    def resume_reading(self) -> None:
        self._p.raw.resume_reading()

    def is_reading(self) -> bool:
        return self._p.raw.is_reading()

    # -- lifetime --------------------------------------------------------------
    def close(self) -> None:
        self._p.close()

    def abort(self) -> None:
        self._p.raw.abort()

    def is_closing(self) -> bool:
        return self._p.closing or self._p.raw.is_closing()

    def get_extra_info(self, name: str, default=None):
        if name == "obfs4":
            return self._p
        if name == "session_error":  # why the peer's frames ended the session, or None
            return self._p.error
        return self._p.raw.get_extra_info(name, default)

    def get_protocol(self):
        return self._p.app

    def set_protocol(self, protocol) -> None:
        self._p.app = protocol


class Obfs4Protocol(asyncio.BufferedProtocol):
    """The session between the raw TCP transport and the application's protocol."""

    def __init__(self, raw: asyncio.Transport, encoder: Encoder, decoder: Decoder,
                 shaping: Shaping, is_server: bool) -> None:
        self.raw = raw
        self.enc = PacketEncoder(encoder)
        self.dec = PacketDecoder(decoder)
        self.shaping = shaping
        self.is_server = is_server
        self.loop = asyncio.get_running_loop()
        self.reader = asyncio.StreamReader(limit=READER_LIMIT, loop=self.loop)
        self.app: asyncio.Protocol = asyncio.StreamReaderProtocol(self.reader, loop=self.loop)
        self.transport = Obfs4Transport(self)
        self.writer = asyncio.StreamWriter(self.transport, self.app, self.reader, self.loop)
        self.closing = False
        self.queued = 0  # wire bytes waiting in the IAT queue
        self._chunks: deque[bytes | bytearray] = deque()
        self._pacer: asyncio.Task | None = None
        self._raw_paused = False  # the socket's write buffer is full
        self._queue_paused = False  # the IAT queue is over the high-water mark
        self.error: Exception | None = None
        self.handshake_writer: asyncio.StreamWriter | None = None
        # The handshake's protocol, which no longer hears from the socket: told
        # when the connection ends (see connection_lost).
        self.handshake_protocol: asyncio.BaseProtocol | None = None
        # Received wire bytes: buf[:_rlen] is at most one partial frame between reads.
        self._rbuf = bytearray(RECV_BUFFER)
        self._rview = memoryview(self._rbuf)
        self._rlen = 0
        self._linger: asyncio.TimerHandle | None = None
        self.app.connection_made(self.transport)

    # -- raw side --------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        return self._rview[self._rlen:]

    def buffer_updated(self, nbytes: int) -> None:
        if self.closing:  # lingering: the session is over, what still comes is dropped
            return
        self._rlen += nbytes
        self._decode()

    def data_received(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes that did not come through :meth:`get_buffer` (the handshake's leftover)."""
        with memoryview(data) as view:
            pos = 0
            while pos < len(view) and self.error is None and not self.closing:
                n = min(len(view) - pos, len(self._rbuf) - self._rlen)
                self._rview[self._rlen:self._rlen + n] = view[pos:pos + n]
                self._rlen += n
                pos += n
                self._decode()

    def _decode(self) -> None:
        if self.error is not None:
            return
        try:
            consumed, payload, seeds = self.dec.feed_buffer(self._rbuf, self._rlen)
        except FramingError as exc:
            self.error = exc
            self._rlen = 0
            self._deliver(getattr(exc, "data", b""), getattr(exc, "seeds", []))
            self.raw.abort()  # forged or corrupted frames: end the session now
            return
        rest = self._rlen - consumed
        if rest:  # the partial frame moves to the front (at most one segment)
            self._rbuf[:rest] = self._rview[consumed:self._rlen]
        self._rlen = rest
        self._deliver(payload, seeds)

    def _deliver(self, payload: bytes, seeds: list[bytes]) -> None:
        if seeds and not self.is_server:
            self.shaping.reseed(seeds[-1])
        if payload:
            self.app.data_received(payload)

    def eof_received(self) -> bool:
        self.app.eof_received()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._pacer:
            self._pacer.cancel()
        if self._linger is not None:
            self._linger.cancel()
        # A forged or corrupted frame ends the session like an EOF: the
        # application keeps every byte decoded before it. `self.error` keeps
        # the reason for diagnostics (get_extra_info("obfs4").error).
        self.app.connection_lost(exc)
        # The handshake's StreamWriter is still in its owner's hands (a server's
        # client_connected_cb closes it when done): its wait_closed() and drain()
        # wait on the protocol that attach() swapped out, which the socket no
        # longer reaches. Without this they would never return.
        old, self.handshake_protocol = self.handshake_protocol, None
        if old is not None:
            old.connection_lost(exc)

    def pause_writing(self) -> None:
        self._set_paused(raw=True)

    def resume_writing(self) -> None:
        self._set_paused(raw=False)

    def _set_paused(self, *, raw: bool | None = None, queue: bool | None = None) -> None:
        """The application is paused while the socket's or the IAT queue's buffer is full."""
        was = self._raw_paused or self._queue_paused
        if raw is not None:
            self._raw_paused = raw
        if queue is not None:
            self._queue_paused = queue
        now = self._raw_paused or self._queue_paused
        if now and not was:
            self.app.pause_writing()
        elif was and not now:
            self.app.resume_writing()

    # -- application side ------------------------------------------------------
    def feed_initial(self, data: bytes) -> None:
        """Bytes that arrived with the handshake, before this protocol took over."""
        if data:
            self.data_received(data)

    def send(self, data: bytes | bytearray | memoryview) -> None:
        mode = self.shaping.iat_mode
        if mode == IAT_PARANOID:
            wire = self.enc.encode_into(data)  # padded per chunk by the pacer instead
        else:
            wire = self.enc.encode_burst_into(data, self.shaping.len_dist.sample())
        if mode == IAT_NONE:
            self.raw.write(wire)
            return
        self._chunks.append(wire)
        self.queued += len(wire)
        if self.queued > PACED_HIGH_WATER:
            self._set_paused(queue=True)  # drain() waits for the pacer (backpressure)
        if self._pacer is None or self._pacer.done():
            self._pacer = self.loop.create_task(self._pace())

    async def _pace(self) -> None:
        """iat-modes 1 and 2: write segment-sized chunks with random gaps."""
        buf = bytearray()
        zeros = 0
        iat = self.shaping.iat_dist
        assert iat is not None
        while self._chunks or buf:
            while self._chunks:
                buf += self._chunks.popleft()
            if self.shaping.iat_mode == IAT_PARANOID:
                # A fresh length per write; pad when too little is buffered, and
                # resample when the padding overshoots (it needed two frames).
                target = self.shaping.len_dist.sample()
                if target == 0:
                    # obfs4proxy panics here; we resample, and fall back to a
                    # full segment should the table hold nothing but 0.
                    zeros += 1
                    if zeros < MAX_ZERO_DRAWS:
                        await asyncio.sleep(0)  # without starving the loop
                        continue
                    target = MAXIMUM_SEGMENT_LENGTH
                else:
                    zeros = 0
                if len(buf) < target:
                    buf += self.enc.encode(b"", burst_pad_length(len(buf), target))
                    if len(buf) != target:
                        continue
                n = target
            else:
                n = min(len(buf), MAXIMUM_SEGMENT_LENGTH)
            out = bytes(buf[:n])
            del buf[:n]
            self.queued = max(0, self.queued - n)
            if self._queue_paused and self.queued <= PACED_LOW_WATER:
                self._set_paused(queue=False)
            if self.raw.is_closing():
                return
            self.raw.write(out)
            await asyncio.sleep(iat.sample() * IAT_UNIT_S)
        if self._queue_paused:
            self._set_paused(queue=False)
        if self.closing:
            self._shutdown()

    def close(self) -> None:
        """End the session: what is queued goes out, then the socket closes gracefully."""
        if self.closing:
            return
        self.closing = True
        self._rlen = 0
        if self._pacer is None or self._pacer.done():
            self._shutdown()

    def _shutdown(self) -> None:
        """FIN after our data, keep reading (and dropping) until the peer's FIN or
        ``LINGER_S``; eof_received then closes the socket (see the module docs)."""
        raw = self.raw
        if raw.is_closing():
            return
        if not raw.can_write_eof():
            raw.close()
            return
        raw.write_eof()  # asyncio sends the FIN once its write buffer is empty
        if not raw.is_reading():  # the application had paused reading: we must not
            raw.resume_reading()
        self._linger = self.loop.call_later(LINGER_S, raw.close)


def attach(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, leftover: bytes,
           encoder: Encoder, decoder: Decoder, shaping: Shaping,
           is_server: bool) -> Streams:
    """Switch a handshaken TCP connection over to an obfs4 session; return its streams.

    Must be called with no ``await`` since the handshake's last read, so no
    byte can land in the old ``StreamReader`` unseen.
    """
    # A TCP connection's transport reads as well as writes (a cast, not isinstance:
    # uvloop's transports are no asyncio.Transport).
    raw = cast(asyncio.Transport, writer.transport)
    proto = Obfs4Protocol(raw, encoder, decoder, shaping, is_server)
    # The handshake's StreamWriter closes the socket when garbage-collected
    # (StreamWriter.__del__): the session keeps it for as long as it lives.
    proto.handshake_writer = writer
    proto.handshake_protocol = raw.get_protocol()
    # What the handshake's reader already holds (StreamReader keeps it in a private
    # buffer, read here once since nothing will read that reader again).
    buffered = getattr(reader, "_buffer", None)
    pending = bytes(buffered) if buffered else b""
    raw.set_protocol(proto)
    raw.set_write_buffer_limits(high=WRITE_HIGH_WATER)
    if not raw.is_reading():
        raw.resume_reading()
    proto.feed_initial(leftover + pending)
    if reader.at_eof():
        proto.eof_received()
    return proto.reader, proto.writer
