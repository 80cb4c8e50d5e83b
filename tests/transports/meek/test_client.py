"""Our meek client: the polling schedule on a virtual clock, retries, arguments, and
byte-exact transfers against our server on loopback."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest
from aiohttp.test_utils import TestServer

from tests.support.echo import echo
from transports.base import TransportError
from transports.meek.client import (
    INIT_POLL_S,
    MAX_PAYLOAD,
    MAX_POLL_S,
    MeekArgs,
    MeekClientFactory,
    MeekSession,
    new_session_id,
    next_interval,
)
from transports.meek.server import MeekConfig, MeekServer, dial_tcp


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    async def sleep(self, seconds: float) -> None:
        """Time passes only for a sleep that is not cut short: ready work (data that
        already arrived) runs first, during these yields."""
        for _ in range(10):
            await asyncio.sleep(0)
        self.now += seconds


class ScriptedServer:
    """A round tripper on the virtual clock: answers ``replies`` in turn, then empty."""

    def __init__(self, clock: VirtualClock, replies: list[tuple[int, bytes]] | None = None,
                 stop_after: int = 12, stop_at_bytes: int | None = None) -> None:
        self.clock, self.replies, self.stop_after = clock, list(replies or []), stop_after
        self.stop_at_bytes = stop_at_bytes
        self.times: list[float] = []
        self.bodies: list[bytes] = []
        self.ids: set[str] = set()

    async def post(self, body: bytes, session_id: str) -> tuple[int, bytes]:
        self.times.append(self.clock.now)
        self.bodies.append(body)
        self.ids.add(session_id)
        if self.stop_at_bytes is not None:
            if sum(map(len, self.bodies)) >= self.stop_at_bytes:
                raise ConnectionError("enough")
        elif len(self.times) >= self.stop_after:
            raise ConnectionError("enough")
        return self.replies.pop(0) if self.replies else (200, b"")

    async def close(self) -> None:
        pass


async def session_over_socketpair(rt, clock):
    import socket
    a, b = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=a)
    app_reader, app_writer = await asyncio.open_connection(sock=b)
    return MeekSession(rt, reader, writer, sleep=clock.sleep, retry_delay_s=30.0), \
        app_reader, app_writer


async def test_idle_polls_follow_meek_lites_schedule():
    """After a round trip that moved data: at once, then 100 ms, x1.5 each, capped at 5 s
    (docs/transports/meek.md §2.2: meek_lite's polls reached the server 118/166/239/353 ms apart,
    that is this schedule plus ~15 ms of RTT and turnaround)."""
    clock = VirtualClock()
    rt = ScriptedServer(clock, [(200, b"welcome")], stop_after=16)
    session, app_reader, app_writer = await session_over_socketpair(rt, clock)
    app_writer.write(b"hello")
    await app_writer.drain()
    await asyncio.sleep(0.05)  # the data is waiting when the session starts
    await session.run()
    assert rt.bodies[0] == b"hello" and await app_reader.read(7) == b"welcome"
    assert rt.times[0] == 0.0  # waiting data cuts the first 100 ms wait short
    gaps = [round(b - a, 6) for a, b in zip(rt.times, rt.times[1:], strict=False)]
    want = [0.0, 0.1, 0.15, 0.225, 0.3375, 0.50625, 0.759375, 1.139063, 1.708594, 2.562891,
            3.844336, 5.0, 5.0, 5.0, 5.0]
    assert gaps == pytest.approx(want, abs=1e-6)
    measured_meek_lite = [0.118, 0.166, 0.239, 0.353]  # ours + ~15 ms RTT/turnaround
    for ours, theirs in zip(gaps[1:5], measured_meek_lite, strict=True):
        assert 0 < theirs - ours < 0.025
    assert len(rt.ids) == 1 and len(next(iter(rt.ids))) == 32


async def test_bodies_coalesce_what_was_written_up_to_64_kib():
    clock = VirtualClock()
    rt = ScriptedServer(clock, stop_at_bytes=MAX_PAYLOAD + 100)
    session, _, app_writer = await session_over_socketpair(rt, clock)
    task = asyncio.create_task(session.run())
    await asyncio.sleep(0.05)
    app_writer.write(b"a" * (MAX_PAYLOAD + 100))
    await app_writer.drain()
    await task
    sent = b"".join(rt.bodies)
    assert sent == b"a" * (MAX_PAYLOAD + 100)
    assert max(len(b) for b in rt.bodies) == MAX_PAYLOAD


async def test_non_200_is_retried_with_the_same_body_then_gives_up():
    clock = VirtualClock()
    rt = ScriptedServer(clock, [(502, b"")] * 3 + [(200, b"ok")], stop_after=5)
    session, app_reader, app_writer = await session_over_socketpair(rt, clock)
    app_writer.write(b"payload")
    await app_writer.drain()
    await asyncio.sleep(0.05)
    await session.run()
    assert rt.bodies[:4] == [b"payload"] * 4
    assert rt.times[1] - rt.times[0] == pytest.approx(30.0)
    assert await app_reader.read(2) == b"ok"

    clock = VirtualClock()
    rt = ScriptedServer(clock, [(500, b"")] * 20, stop_after=50)
    session, app_reader, _ = await session_over_socketpair(rt, clock)
    await session.run()
    assert len(rt.times) == 10 and "10 times" in (session.error or "")
    assert await app_reader.read(1) == b""  # the application sees the end


async def test_application_closing_cuts_the_retry_delay_short():
    """Our server answers 500 for good once the upstream has ended (an HTTP response
    with Connection: close); when the application then closes, the session ends at
    once instead of outliving it by the 30 s retry delay (the PT's SOCKS handler
    with it)."""
    rt = ScriptedServer(VirtualClock(), [(200, b"response")] + [(500, b"")] * 20, stop_after=50)
    session, app_reader, app_writer = await session_over_socketpair(rt, VirtualClock())
    session.sleep = asyncio.sleep  # a real 30 s retry delay
    app_writer.write(b"request")
    await app_writer.drain()
    run = asyncio.create_task(session.run())
    try:
        assert await asyncio.wait_for(app_reader.readexactly(8), 2) == b"response"
        while len(rt.bodies) < 2:  # the poll that got the first 500
            await asyncio.sleep(0.01)
        app_writer.close()
        await asyncio.wait_for(run, 2)
    finally:
        run.cancel()
    assert rt.bodies == [b"request", b""]  # no retry after the application left
    assert "the application closed" in (session.error or "")


def test_schedule_and_ids():
    assert next_interval(0.0, moved=False) == INIT_POLL_S
    assert next_interval(4.0, moved=False) == MAX_POLL_S
    assert next_interval(2.0, moved=True) == 0.0
    ids = {new_session_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


@pytest.mark.parametrize("args, url, host", [
    ({"url": "https://meek.lab/"}, "https://meek.lab/", "meek.lab"),
    ({"url": "https://meek.lab", "front": "front.lab"}, "https://front.lab/", "meek.lab"),
    ({"url": "https://meek.lab:8443/x", "front": "front.lab:443"}, "https://front.lab:443/x",
     "meek.lab:8443"),
])
def test_front_replaces_host_and_port_but_not_the_host_header(args, url, host):
    a = MeekArgs.parse(args)
    assert (a.url, a.host, a.tls) == (url, host, "python")


@pytest.mark.parametrize("args, msg", [
    ({}, "missing argument 'url'"),
    ({"url": "ftp://x/"}, "must be http"),
    ({"url": "https:///"}, "must be http"),
    ({"url": "https://x/", "front": "a/b"}, "bad front"),
])
def test_bad_arguments_are_named(args, msg):
    with pytest.raises(TransportError, match=msg):
        MeekArgs.parse(args)


@pytest.mark.parametrize("tls", ["python", "chrome"])
async def test_byte_exact_both_ways_against_our_server(tls):
    """2 MB up and down at once through our client and server (HTTP, loopback)."""
    upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
    server = MeekServer(MeekConfig(), dial_tcp("127.0.0.1", upstream.sockets[0].getsockname()[1]))
    ts = TestServer(server.app, host="127.0.0.1")
    await ts.start_server()
    try:
        factory = MeekClientFactory(MeekArgs.parse({"url": str(ts.make_url("/")), "tls": tls}))
        reader, writer = await factory.dial("0.0.2.0", 1)
        data = os.urandom(2_000_000)

        async def send() -> None:
            for i in range(0, len(data), 100_000):
                writer.write(data[i:i + 100_000])
                await writer.drain()

        async def receive() -> bytes:
            got = bytearray()
            while len(got) < len(data):
                chunk = await asyncio.wait_for(reader.read(1 << 20), 20)
                assert chunk
                got += chunk
            return bytes(got)

        _, got = await asyncio.gather(send(), receive())
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
        writer.close()
        assert server.stats.sessions == 1
    finally:
        await ts.close()
        upstream.close()
