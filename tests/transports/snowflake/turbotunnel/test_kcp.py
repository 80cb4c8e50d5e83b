"""KCP driving: Snowflake's settings on the wire, byte-exact transfer under loss
and reordering, back-pressure, and close."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import struct

import pytest

from tests.support.clock import ManualClock
from transports.snowflake.turbotunnel import kcp
from transports.snowflake.turbotunnel.clientbuffer import Meter

SEG = struct.Struct("<IBBHIIII")


def segments(packet: bytes) -> list[tuple]:
    out, i = [], 0
    while i + kcp.HEADER_LEN <= len(packet):
        conv, cmd, frg, wnd, ts, sn, una, length = SEG.unpack_from(packet, i)
        out.append((conv, cmd, frg, wnd, sn, length))
        i += kcp.HEADER_LEN + length
    assert i == len(packet)
    return out


class Link:
    """Two KCP ends joined by a lossy, reordering packet path (seeded)."""

    def __init__(self, loss: float = 0.0, reorder: float = 0.0, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.loss, self.reorder = loss, reorder
        self.wire: list[bytes] = []
        self.a = kcp.KCPConn(0x8badf00d, lambda p: self._send(p, "b"))
        self.b = kcp.KCPConn(0x8badf00d, lambda p: self._send(p, "a"))
        self.a_to_b: list[bytes] = []

    def _send(self, packet: bytes, to: str) -> None:
        if to == "b":
            self.wire.append(packet)
        if self.rng.random() < self.loss:
            return
        delay = 0.02 if self.rng.random() < self.reorder else 0.001
        end = self.b if to == "b" else self.a
        asyncio.get_running_loop().call_later(delay, end.input, [packet])

    async def close(self) -> None:
        await self.a.close()
        await self.b.close()


async def read_n(conn: kcp.KCPConn, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        data = await conn.read()
        assert data, "closed early"
        buf += data
    return bytes(buf)


async def test_wire_format_matches_snowflake_settings():
    link = Link()
    await link.a.write(os.urandom(2000))
    await asyncio.sleep(0.05)
    data = [s for p in link.wire for s in segments(p) if s[1] == 81]
    # Stream mode: 2000 bytes become a full MSS segment and the rest, frg 0, wnd 65535.
    assert [(s[0], s[2], s[3], s[5]) for s in data[:2]] == [
        (0x8badf00d, 0, 65535, 1376), (0x8badf00d, 0, 65535, 624)]
    assert max(len(p) for p in link.wire) <= kcp.MTU
    await link.close()


@pytest.mark.parametrize("loss,reorder", [(0.0, 0.0), (0.05, 0.1)])
async def test_transfer_is_byte_exact_both_ways(loss, reorder):
    link = Link(loss, reorder, seed=7)
    up, down = os.urandom(600_000), os.urandom(400_000)
    got = await asyncio.wait_for(asyncio.gather(
        link.a.write(up), link.b.write(down), read_n(link.b, len(up)), read_n(link.a, len(down))),
        30)
    assert hashlib.sha256(got[2]).digest() == hashlib.sha256(up).digest()
    assert got[3] == down
    await link.close()


async def test_writer_waits_when_the_peer_is_gone():
    sent: list[bytes] = []
    conn = kcp.KCPConn(1, sent.append)
    blob = os.urandom(kcp.SEND_CHUNK)
    writer = asyncio.create_task(_write_forever(conn, blob))
    await asyncio.sleep(0.2)
    # Nothing is ever acknowledged, so the writer parks near the high-water mark.
    assert not writer.done()
    assert kcp.HIGH_WATER <= conn.unsent <= kcp.HIGH_WATER + kcp.SEND_CHUNK // 1376 + 1
    await conn.close()
    with pytest.raises(kcp.KCPClosed):
        await writer


async def _write_forever(conn: kcp.KCPConn, blob: bytes) -> None:
    while True:
        await conn.write(blob)


async def test_read_returns_empty_after_close_and_input_is_ignored():
    conn = kcp.KCPConn(5, lambda p: None)
    reader = asyncio.create_task(conn.read())
    await asyncio.sleep(0.01)
    await conn.close()
    assert await reader == b""
    assert conn.input([b"\x00" * 30]) == 0


async def test_garbage_and_foreign_conv_are_dropped():
    conn = kcp.KCPConn(5, lambda p: None)
    assert conn.input([b"short", os.urandom(100), b"\x06\x00\x00\x00" + bytes(40)]) == 0
    await conn.close()


def test_packet_helpers():
    pkt = SEG.pack(0x01020304, 81, 0, 65535, 0, 9, 0, 0)
    assert kcp.conversation_of(pkt) == 0x01020304
    assert kcp.first_sn(pkt) == 9
    with pytest.raises(ValueError):
        kcp.conversation_of(b"abc")


async def test_smux_over_lossy_kcp():
    from transports.snowflake.turbotunnel import smux

    link = Link(0.03, 0.05, seed=3)
    client = smux.Session(link.a, client=True).start()
    server = smux.Session(link.b, client=False).start()
    payload = os.urandom(1_500_000)

    async def serve():
        st = await server.accept_stream()
        data = await st.readexactly(len(payload))
        await st.write(hashlib.sha256(data).digest())
        await st.close()

    task = asyncio.create_task(serve())
    st = await client.open_stream()
    await st.write(payload)
    digest = await asyncio.wait_for(st.readexactly(32), 30)
    assert digest == hashlib.sha256(payload).digest()
    await task
    await client.close()
    await server.close()
    await link.close()


async def test_retransmission_backoff_is_additive_like_kcp_go():
    now = [100.0]
    sent: list[tuple[float, int]] = []
    conn = kcp.KCPConn(9, lambda p: sent.extend((now[0], s[4]) for s in segments(p)
                                                if s[1] == 81), clock=lambda: now[0])
    await conn.write(b"hello")
    for _ in range(1000):  # 10 s of 10 ms ticks on the injected clock
        now[0] += 0.01
        conn._kcp.update(conn._now())
    times = [t for t, sn in sent if sn == 0]
    gaps = [round((b - a) * 1000) for a, b in zip(times, times[1:], strict=False)]
    # Doubling (ikcp's nodelay 0) would give 200, 400, 800, 1600, ...; kcp-go adds
    # a constant per retry. We add rx_rto / 2 = 100 ms per retry.
    steps = [b - a for a, b in zip(gaps, gaps[1:], strict=False)]
    assert len(gaps) >= 8 and all(90 <= s <= 110 for s in steps), gaps
    await conn.close()



async def test_a_write_waits_while_may_send_refuses_and_the_meter_counts_segments():
    """The bridge's client buffer (clientbuffer.py): a write waits for room, asked
    with the whole segments it would add; what KCP holds unacknowledged is metered
    at MTU bytes a segment, and released at close."""
    costs: list[int] = []
    allowed = False

    def may_send(cost: int) -> bool:
        costs.append(cost)
        return allowed

    meter = Meter()
    conn = kcp.KCPConn(7, lambda _p: None, meter=meter, may_send=may_send)
    try:
        writer = asyncio.create_task(conn.write(b"x" * 3000))
        await asyncio.sleep(0.05)  # five ticks
        assert not writer.done() and meter.bytes == 0 and len(costs) > 1
        assert set(costs) == {3 * kcp.MTU}  # 3000 bytes are three 1376-byte segments
        allowed = True
        await asyncio.wait_for(writer, 1)  # a tick asks again
        assert meter.bytes == 3 * kcp.MTU == conn.unsent * kcp.MTU
    finally:
        await conn.close()
    assert meter.bytes == 0


async def test_stalled_for_counts_from_the_last_acknowledgement_while_data_waits():
    clock = ManualClock(500.0)
    held: list[bytes] = []
    b = kcp.KCPConn(9, lambda p: a.input([p]), clock=clock)
    a = kcp.KCPConn(9, held.append, clock=clock)
    try:
        assert a.stalled_for(clock.t) == 0.0  # nothing waits for an ACK
        await a.write(b"hello")
        a._flush()  # what the scheduled flush does
        assert held
        clock.t += 3.0
        assert a.stalled_for(clock.t) == 3.0
        b.input(held)  # delivered at last: b acknowledges at once
        assert a.stalled_for(clock.t) == 0.0 and a.unsent == 0
        assert await read_n(b, 5) == b"hello"
        # Data written later waits from its own start, not from the last ACK.
        clock.t += 10.0
        await a.write(b"again")
        clock.t += 1.5
        assert a.stalled_for(clock.t) == 1.5
    finally:
        await a.close()
        await b.close()
    assert a.stalled_for(clock.t) == 0.0  # a closed conversation waits for nothing
