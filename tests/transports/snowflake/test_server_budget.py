"""The bridge's client buffer end to end (issue 48): a client that reads nothing
holds no more than its share while its upstream meets a closed TCP window; a
client that reads gets every byte through a buffer far smaller than its
download; a dead link is ended; a spent budget is won back from the stalled; a
full connection table sheds the WebSocket silent longest."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct

import pytest

from tests.transports.snowflake.test_server import hash_server
from transports.snowflake import server as sfserver
from transports.snowflake.carriers import WebSocketCarrier
from transports.snowflake.turbotunnel import TOKEN, encapsulation
from transports.snowflake.turbotunnel.clientbuffer import MIN_SHARE
from transports.snowflake.turbotunnel.redial import TurboTunnelSession

PATTERN = os.urandom(65536)


class Flood:
    """An upstream that sends PATTERN without end to every connection, counting
    what the bridge took."""

    def __init__(self) -> None:
        self.sent = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        async def handle(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    writer.write(PATTERN)
                    await writer.drain()
                    self.sent += len(PATTERN)
            except (ConnectionError, asyncio.CancelledError):
                writer.close()
        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


def masked(payload: bytes) -> bytes:
    mask, n = os.urandom(4), len(payload)
    head = bytes([0x82, 0x80 | n]) if n < 126 else bytes([0x82, 0xFE]) + struct.pack("!H", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def never_reading_client(port: int) -> asyncio.StreamWriter:
    """Issue 48's attacker: Turbo Tunnel's token, a ClientID, a KCP segment carrying
    an smux SYN for stream 3, and then nothing read, ever."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n".encode())
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
    syn = struct.pack("<BBHI", 2, 0, 0, 3)
    segment = struct.pack("<IBBHIIII", int.from_bytes(os.urandom(4), "little"), 81, 0,
                          65535, 0, 0, 0, len(syn)) + syn
    writer.write(masked(TOKEN + os.urandom(8) + encapsulation.encode(segment)))
    await writer.drain()
    return writer


async def start_bridge(dest: int, **cfg) -> tuple[sfserver.SnowflakeBridge, object, str]:
    bridge = sfserver.SnowflakeBridge(sfserver.BridgeConfig(dest=("127.0.0.1", dest), **cfg))
    listening = await sfserver.listen(bridge, "127.0.0.1", 0)
    return bridge, listening, f"ws://127.0.0.1:{listening.port}/"


async def download(url: str, n: int, timeout: float = 30.0) -> bool:
    """A reading client's byte-exact download of ``n`` bytes from hash_server."""
    async def dial():
        return await WebSocketCarrier.connect(url)
    session = TurboTunnelSession(dial).start()
    try:
        reader, writer = await asyncio.wait_for(session.open_stream(), timeout)
        writer.write(b"D%d\n" % n)
        digest = await asyncio.wait_for(reader.readexactly(32), timeout)
        got = await asyncio.wait_for(reader.readexactly(n), timeout)
        writer.close()
        return hashlib.sha256(got).digest() == digest
    finally:
        await session.close()


async def wait_until(predicate, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_client_that_reads_nothing_holds_its_share_and_the_upstream_stops():
    flood = Flood()
    bridge, listening, _ = await start_bridge(await flood.start(), client_buffer=4 * MIN_SHARE,
                                              max_streams=4)
    attackers = [await never_reading_client(listening.port) for _ in range(2)]
    try:
        await wait_until(lambda: bridge.open_streams == 2)
        peak = 0
        for _ in range(40):  # two seconds
            await asyncio.sleep(0.05)
            peak = max(peak, bridge.buffer.used)
            for s in bridge.clients.sessions.values():
                # Its data (KCP, the stream's queue and upstream read side) and its
                # packets in flight each hold the session's streams' shares at most.
                assert s.held - s.in_flight <= bridge.buffer.allowance(s.streams)
                assert s.in_flight <= bridge.buffer.allowance(s.streams)
        assert 0 < peak <= bridge.buffer.total
        taken = flood.sent
        await asyncio.sleep(1.0)
        assert flood.sent == taken  # nothing more read: the upstream's window is shut
    finally:
        for w in attackers:
            w.close()
        await listening.aclose()
        flood.close()


async def test_a_reading_client_gets_every_byte_through_a_small_buffer():
    srv, port = await hash_server()
    bridge, listening, url = await start_bridge(port, client_buffer=4 * MIN_SHARE,
                                                max_streams=4)
    try:
        assert await download(url, 8_000_000)  # ten times the whole budget
        assert bridge.buffer.peak <= bridge.buffer.total
    finally:
        await listening.aclose()
        srv.close()


async def test_a_dead_link_is_ended_and_its_websocket_closed():
    flood = Flood()
    bridge, listening, _ = await start_bridge(await flood.start(), dead_link_s=1.0)
    attacker = await never_reading_client(listening.port)
    try:
        await wait_until(lambda: bridge.open_streams == 1)
        await wait_until(lambda: bridge.clients.dead_links == 1, timeout=8)
        await wait_until(lambda: attacker.transport.is_closing() or not bridge.clients.sessions)
        await wait_until(lambda: bridge.open_streams == 0 and bridge.buffer.used == 0)
    finally:
        attacker.close()
        await listening.aclose()
        flood.close()


async def test_a_spent_budget_is_won_back_from_stalled_sessions_for_a_reader():
    srv, port = await hash_server()
    flood = Flood()
    flood_port = await flood.start()
    # Attackers' streams go to the flood, the reader's to hash_server: the handoff
    # picks by the order they come in.
    targets = iter([flood_port, flood_port, flood_port])
    bridge, listening, url = await start_bridge(port, client_buffer=4 * MIN_SHARE,
                                                max_streams=4)
    default = bridge._default_handoff

    async def handoff(inner, client_ip):
        bridge.config.dest = ("127.0.0.1", next(targets, port))
        await default(inner, client_ip)
    bridge._handoff = handoff
    bridge.buffer.stall_s = 0.5
    attackers = [await never_reading_client(listening.port) for _ in range(3)]
    try:
        await wait_until(lambda: bridge.buffer.used > bridge.buffer.total * 3 // 4)
        assert await download(url, 2_000_000)
        assert bridge.buffer.relieved >= 1
    finally:
        for w in attackers:
            w.close()
        await listening.aclose()
        srv.close()
        flood.close()


async def test_a_full_connection_table_sheds_the_websocket_silent_longest():
    srv, port = await hash_server()
    bridge, listening, url = await start_bridge(
        port, http_options={"http-max-connections": "3"})
    attackers = [await never_reading_client(listening.port) for _ in range(3)]
    try:
        await wait_until(lambda: len(bridge._links) == 3)
        assert await download(url, 100_000)
        assert bridge.stats.shed_websockets >= 1
        assert listening.guard.stats.shed >= 1 and listening.guard.stats.refused == 0
    finally:
        for w in attackers:
            w.close()
        await listening.aclose()
        srv.close()


@pytest.mark.parametrize("options, complaint", [
    ({"client-buffer": "1000"}, "client-buffer must be at least"),
    ({"client-buffer": "x"}, "client-buffer must be a whole number"),
    ({"dead-link-timeout": "0"}, "dead-link-timeout must be above 0"),
])
def test_a_bad_budget_option_is_refused_in_one_line(options, complaint):
    with pytest.raises(ValueError, match=f"^snowflake server: {complaint}"):
        sfserver.config_from_options(options)


def test_the_budget_options_reach_the_bridge():
    cfg = sfserver.config_from_options({"client-buffer": str(8 << 20),
                                        "dead-link-timeout": "20", "max-streams": "1000"})
    assert (cfg.client_buffer, cfg.dead_link_s) == (8 << 20, 20.0)
    # 8 MiB keeps at most 42 streams at the smallest share, whatever max-streams says.
    assert sfserver.SnowflakeBridge(cfg).max_streams == (8 << 20) // MIN_SHARE == 42
