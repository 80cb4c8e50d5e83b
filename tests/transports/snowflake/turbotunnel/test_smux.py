"""smux v2: captured frames, flow control, FIN, keepalive and bad input, over a pipe."""

from __future__ import annotations

import asyncio
import hashlib
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transports.snowflake.turbotunnel.smux import (
    FIN,
    INITIAL_PEER_WINDOW,
    NOP,
    PSH,
    SYN,
    UPD,
    Config,
    Frame,
    FrameDecoder,
    Session,
    SmuxError,
)


class End:
    """One end of an in-memory byte pipe; records every frame it writes."""

    def __init__(self, inbox: asyncio.Queue[bytes], outbox: asyncio.Queue[bytes]) -> None:
        self.inbox, self.outbox = inbox, outbox
        self.sent = FrameDecoder(2)
        self.frames: list[Frame] = []

    async def read(self) -> bytes:
        return await self.inbox.get()

    async def write(self, data: bytes) -> None:
        self.frames += self.sent.feed(data)
        # Split writes in odd places: the session must not rely on boundaries.
        cut = len(data) // 3
        await self.outbox.put(data[:cut])
        await self.outbox.put(data[cut:])

    def close(self) -> None:
        self.outbox.put_nowait(b"")


def pipe() -> tuple[End, End]:
    a, b = asyncio.Queue(), asyncio.Queue()
    return End(a, b), End(b, a)


def sessions(config: Config | None = None) -> tuple[Session, Session, End, End]:
    c, s = pipe()
    return (Session(c, client=True, config=config).start(),
            Session(s, client=False, config=config).start(), c, s)


def test_frames_seen_from_debian_snowflake_client():
    """SYN sid=3, PSH sid=3 "HELLO-SNOWFLAKE-TEST", NOP sid=0
    (docs/transports/turbotunnel.md §4.4)."""
    assert Frame(2, SYN, 3).pack() == bytes.fromhex("0200000003000000")
    assert Frame(2, PSH, 3, b"HELLO-SNOWFLAKE-TEST").pack() == \
        bytes.fromhex("0202140003000000") + b"HELLO-SNOWFLAKE-TEST"
    assert Frame(2, NOP, 0).pack() == bytes.fromhex("0203000000000000")


@given(st.lists(st.tuples(st.sampled_from([SYN, FIN, PSH, NOP]), st.integers(0, 2**32 - 1),
                          st.binary(max_size=100)), max_size=6), st.data())
def test_decoder_takes_any_split(frames, data):
    wire = b"".join(Frame(2, c, sid, d).pack() for c, sid, d in frames)
    cut = data.draw(st.integers(0, len(wire)))
    dec = FrameDecoder(2)
    got = dec.feed(wire[:cut]) + dec.feed(wire[cut:])
    assert [(f.cmd, f.sid, f.data) for f in got] == frames


@pytest.mark.parametrize("wire, why", [
    (bytes.fromhex("0100000003000000"), "version 1"),
    (bytes.fromhex("0209000003000000"), "unknown command 9"),
    (bytes.fromhex("0204040003000000") + b"abcd", "UPD frame must carry 8"),
])
def test_bad_frames(wire, why):
    with pytest.raises(SmuxError, match=why):
        FrameDecoder(2).feed(wire)


async def test_stream_ids_and_a_byte_exact_transfer_on_concurrent_streams():
    client, server, c_end, s_end = sessions()
    size = 5 * 1024 * 1024
    blobs = [random.Random(i).randbytes(size // 3) for i in range(3)]

    async def serve() -> list[str]:
        digests = []
        for _ in range(3):
            st_ = await server.accept_stream()
            data = bytearray()
            while chunk := await st_.read():
                data += chunk
            await st_.close()
            digests.append((st_.sid, hashlib.sha256(data).hexdigest()))
        return sorted(digests)

    async def send(blob: bytes) -> int:
        st_ = await client.open_stream()
        await st_.write(blob)
        await st_.close()
        return st_.sid

    srv = asyncio.create_task(serve())
    sids = await asyncio.gather(*(send(b) for b in blobs))
    assert sorted(sids) == [3, 5, 7]  # odd from 3 on the client side
    assert await asyncio.wait_for(srv, 30) == sorted(
        (sid, hashlib.sha256(b).hexdigest()) for sid, b in zip(sids, blobs, strict=True))
    upd = [f for f in s_end.frames if f.cmd == UPD]
    assert upd, "the reader announced what it consumed"
    assert max(len(f.data) for f in c_end.frames if f.cmd == PSH) <= 32768
    assert (await server.open_stream()).sid == 2  # even on the server side
    await client.close()
    await server.close()


async def test_a_writer_stops_at_the_peers_window_until_it_reads():
    client, server, _, _ = sessions()
    st_ = await client.open_stream()
    writer = asyncio.create_task(st_.write(bytes(1_000_000)))
    peer = await server.accept_stream()
    await asyncio.sleep(0.2)
    assert st_.num_written == INITIAL_PEER_WINDOW and not writer.done()
    got = 0
    while got < 1_000_000:
        got += len(await peer.read())
    await asyncio.wait_for(writer, 5)
    await client.close()
    await server.close()


async def test_fin_ends_the_readers_stream_after_the_data():
    client, server, c_end, _ = sessions()
    st_ = await client.open_stream()
    await st_.write(b"last words")
    await st_.close()
    peer = await server.accept_stream()
    assert await peer.readexactly(10) == b"last words"
    assert await peer.read() == b""
    assert any(f.cmd == FIN and f.sid == st_.sid for f in c_end.frames)
    with pytest.raises(SmuxError):
        await st_.write(b"more")
    await client.close()
    await server.close()


async def test_keepalives_and_a_silent_peer_times_out():
    cfg = Config(keepalive_interval_s=0.02, keepalive_timeout_s=0.15)
    c, s = pipe()
    client = Session(c, client=True, config=cfg).start()
    await asyncio.sleep(0.1)
    assert any(f.cmd == NOP and f.sid == 0 for f in c.frames)
    await asyncio.sleep(0.3)  # nobody ever answers
    assert client.closed and "keepalive timeout" in str(client.error)
    with pytest.raises(SmuxError):
        await client.accept_stream()


async def test_garbage_from_the_peer_ends_the_session_cleanly():
    c, s = pipe()
    client = Session(c, client=True).start()
    st_ = await client.open_stream()
    await c.inbox.put(b"\x07\x00\x00\x00\x00\x00\x00\x00")
    await asyncio.sleep(0.05)
    assert client.closed and "version 7" in str(client.error)
    assert await st_.read() == b""
    with pytest.raises(SmuxError):
        await client.open_stream()
