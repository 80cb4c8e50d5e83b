"""The bridge with our Turbo Tunnel client over WebSocket carriers: byte-exact
streams, a session that survives its carrier, the preamble rules, bad input,
queue expiry and the ExtORPort handoff."""

from __future__ import annotations

import asyncio
import hashlib
import os

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.echo import echo
from transports.snowflake import server as sfserver
from transports.snowflake.carriers import WebSocketCarrier
from transports.snowflake.turbotunnel import TOKEN, encapsulation
from transports.snowflake.turbotunnel.clientmap import ClientMap
from transports.snowflake.turbotunnel.redial import TurboTunnelSession


async def hash_server():
    """'U' then bytes until EOF: answers with their SHA-256 and length; 'D<n>\\n' sends
    n random bytes after their SHA-256. (A command byte, so a random upload that
    happens to start with "D" is not taken for a download: 1 run in 256 was.)"""
    async def handle(reader, writer):
        first = await reader.readexactly(1)
        if first == b"D":
            n = int((await reader.readline()).decode())
            blob = os.urandom(n)
            writer.write(hashlib.sha256(blob).digest())
            for i in range(0, n, 65536):
                writer.write(blob[i:i + 65536])
                await writer.drain()
        else:
            assert first == b"U", first
            h, total = hashlib.sha256(), 0
            while data := await reader.read(65536):
                h.update(data)
                total += len(data)
            writer.write(h.digest() + total.to_bytes(8, "big"))
        await writer.drain()
        writer.close()
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, srv.sockets[0].getsockname()[1]


@pytest.fixture
async def bridge():
    srv, port = await hash_server()
    b = sfserver.SnowflakeBridge(sfserver.BridgeConfig(dest=("127.0.0.1", port)))
    listening = await sfserver.listen(b, "127.0.0.1", 0)
    b.url = f"ws://127.0.0.1:{listening.port}/?client_ip=198.18.0.2"
    yield b
    await listening.aclose()
    srv.close()


async def upload(session: TurboTunnelSession, payload: bytes) -> bytes:
    reader, writer = await session.open_stream()
    writer.write(b"U")
    for i in range(0, len(payload), 65536):
        writer.write(payload[i:i + 65536])
        await writer.drain()
    writer.write_eof()
    reply = await reader.readexactly(40)
    writer.close()
    return reply


async def test_upload_and_download_byte_exact(bridge):
    async def dial():
        return await WebSocketCarrier.connect(bridge.url)
    session = TurboTunnelSession(dial).start()
    payload = os.urandom(3_000_000)
    reply = await asyncio.wait_for(upload(session, payload), 30)
    assert reply == hashlib.sha256(payload).digest() + len(payload).to_bytes(8, "big")
    reader, writer = await session.open_stream()
    writer.write(b"D2000000\n")
    digest = await reader.readexactly(32)
    got = await asyncio.wait_for(reader.readexactly(2_000_000), 30)
    assert hashlib.sha256(got).digest() == digest
    assert await reader.read() == b""
    writer.close()
    assert bridge.stats.streams == 2
    (cs,) = bridge.clients.sessions.values()
    assert cs.client_ip == "198.18.0.2" and cs.client_id == session.client_id
    await session.close()


async def test_session_survives_losing_its_carrier(bridge):
    carriers: list[WebSocketCarrier] = []

    async def dial():
        c = await WebSocketCarrier.connect(bridge.url)
        carriers.append(c)
        return c
    session = TurboTunnelSession(dial).start()
    payload = os.urandom(4_000_000)
    task = asyncio.create_task(upload(session, payload))
    while session.kcp.packets_out < 500:
        await asyncio.sleep(0.01)
    await carriers[0].close()  # the "proxy" goes away mid-transfer
    reply = await asyncio.wait_for(task, 60)
    assert reply[:32] == hashlib.sha256(payload).digest()
    assert session.stats.carriers >= 2 and len(carriers) >= 2
    assert bridge.stats.websockets >= 2 and len(bridge.clients.sessions) == 1
    await session.close()


async def test_preamble_rules_and_plain_http(bridge):
    async with aiohttp.ClientSession() as http:
        async with http.get(bridge.url.replace("ws:", "http:")) as resp:
            assert resp.status == 400
        ws = await http.ws_connect(bridge.url)  # silent, then gone: no error
        await ws.close()
        ws = await http.ws_connect(bridge.url)
        await ws.send_bytes(b"GET / HTTP/1.1\r\n")  # not the token
        msg = await ws.receive()
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        ws = await http.ws_connect(bridge.url)
        await ws.send_bytes(TOKEN[:3])
        await ws.send_bytes(TOKEN[3:] + b"ABCDEFGH" + b"\xff\xff\xff\xff")  # bad prefix
        msg = await ws.receive()
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        # garbage KCP packets: dropped, the bridge keeps serving
        ws = await http.ws_connect(bridge.url)
        await ws.send_bytes(TOKEN + b"12345678" + encapsulation.encode(b"x" * 10)
                            + encapsulation.encode(os.urandom(200)))
        await ws.close()
    await asyncio.sleep(0.05)
    assert bridge.stats.bad_token == 1 and bridge.stats.empty >= 1

    async def dial():
        return await WebSocketCarrier.connect(bridge.url)
    session = TurboTunnelSession(dial).start()
    assert (await asyncio.wait_for(upload(session, b"still here"), 10))[:32] == \
        hashlib.sha256(b"still here").digest()
    await session.close()


async def test_queue_expires_without_a_websocket():
    now = [1000.0]
    b = sfserver.SnowflakeBridge(sfserver.BridgeConfig(dest=("127.0.0.1", 9),
                                                       queue_timeout_s=60, clock=lambda: now[0]))
    cs = b.clients.attach(b"c" * 8, "198.18.0.9")
    cs.outgoing.put_nowait(b"p")
    b.clients.detach(cs)
    now[0] += 59
    assert b.clients.expire() == 0 and cs.outgoing.qsize() == 1
    now[0] += 2
    assert b.clients.expire() == 1 and cs.outgoing.empty()
    # A full queue drops instead of blocking.
    for _ in range(b.config.queue_len + 5):
        cs._enqueue(b"p")
    assert cs.outgoing.qsize() == b.config.queue_len and cs.dropped_out == 5


def test_client_addr_forms():
    assert sfserver._client_addr("198.18.0.2") == "198.18.0.2:1"
    assert sfserver._client_addr("2001:db8::2") == "[2001:db8::2]:1"
    assert sfserver._client_addr("") == ""
    assert sfserver.parse_client_ip("not an ip") == ""
    assert sfserver.parse_client_ip("[2001:db8::5]") == "2001:db8::5"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=120), max_size=8))
async def test_fuzzed_packets_never_crash_a_client_session(packets):
    async def refuse(stream, session):
        await stream.close()
    cmap = ClientMap(refuse)
    cs = cmap.attach(b"f" * 8, "")
    cs.incoming(packets)
    cs.incoming([bytes(24) + b"x", *packets])
    await cmap.close()
    assert not cmap.sessions


async def test_pt_server_mode_hands_streams_to_the_extended_orport(tmp_path):
    """ptadapter plays tor: our PT runs the bridge, and the Extended ORPort sees
    TRANSPORT=snowflake and USERADDR=<the proxy's client_ip>:1."""
    import sys

    from ptadapter import ExtServerAdapter

    seen: asyncio.Queue = asyncio.Queue()

    async def on_connection(r, w, info):
        await seen.put(info)
        await echo(r, w)

    ext = ExtServerAdapter([sys.executable, "-m", "transports.pt"], tmp_path / "s", on_connection)
    ext.add_transport("snowflake", "127.0.0.1", 0)
    async with ext:
        b = ext.get_transport("snowflake")
        url = f"ws://{b.host}:{b.port}/?client_ip=198.18.0.7"

        async def dial():
            return await WebSocketCarrier.connect(url)
        session = TurboTunnelSession(dial).start()
        reader, writer = await session.open_stream()
        payload = os.urandom(300_000)
        writer.write(payload)
        got = await asyncio.wait_for(reader.readexactly(len(payload)), 20)
        assert got == payload
        info = await asyncio.wait_for(seen.get(), 5)
        writer.close()
        await session.close()
    assert info.transport == "snowflake"
    assert (str(info.host), info.port) == ("198.18.0.7", 1)


async def test_streams_over_the_per_client_cap_are_closed_at_once():
    srv, port = await hash_server()
    b = sfserver.SnowflakeBridge(sfserver.BridgeConfig(dest=("127.0.0.1", port),
                                                       max_streams_per_client=2))
    listening = await sfserver.listen(b, "127.0.0.1", 0)
    url = f"ws://127.0.0.1:{listening.port}/"

    async def dial():
        return await WebSocketCarrier.connect(url)
    session = TurboTunnelSession(dial).start()
    try:
        held = [await session.open_stream() for _ in range(2)]  # open, and silent
        while b.open_streams < 2:
            await asyncio.sleep(0.01)
        reader, writer = await session.open_stream()
        writer.write(b"D10\n")
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, no data
        assert b.stats.refused_streams == 1 and b.open_streams == 2
        held[0][1].write(b"D10\n")  # a held stream still works...
        assert len(await asyncio.wait_for(held[0][0].readexactly(42), 10)) == 42
        held[0][1].close()
        while b.open_streams > 1:
            await asyncio.sleep(0.01)
        reader, writer = await session.open_stream()  # ...and, one closed, a new one does
        writer.write(b"D10\n")
        assert len(await asyncio.wait_for(reader.readexactly(42), 10)) == 42
    finally:
        await session.close()
        await listening.aclose()
        srv.close()


async def test_the_client_map_is_capped_and_forgets_ids_that_never_spoke_kcp():
    now = [1000.0]

    async def never(_stream, _session):
        raise AssertionError("no stream expected")
    cmap = ClientMap(never, max_clients=3, queue_timeout_s=60, clock=lambda: now[0])
    sessions = []
    for i in range(3):
        s = cmap.attach(bytes([i]) * 8, "")
        now[0] += 1
        sessions.append(s)
    cmap.detach(sessions[1])  # detached the longest once the others detach later
    now[0] += 1
    cmap.detach(sessions[0])
    # Full: a new ClientID ends the one detached the longest; attached ones stay.
    cmap.attach(b"\x09" * 8, "")
    assert set(cmap.sessions) == {b"\x00" * 8, b"\x02" * 8, b"\x09" * 8}
    assert cmap.evicted == 1
    # All attached: nobody is ended, the map grows past its cap rather than cut a
    # live WebSocket's session.
    cmap.attach(b"\x00" * 8, "")
    cmap.attach(b"\x0a" * 8, "")
    assert len(cmap.sessions) == 4 and cmap.evicted == 1
    # A ClientID that never spoke KCP is forgotten after the queue timeout without
    # a WebSocket, and not before.
    cmap.detach(sessions[2])
    now[0] += 60
    cmap.expire()
    assert b"\x02" * 8 in cmap.sessions
    now[0] += 1
    cmap.expire()
    assert b"\x02" * 8 not in cmap.sessions and cmap.forgotten == 1


async def test_at_the_stream_cap_the_biggest_holder_loses_its_oldest_stream():
    srv, port = await hash_server()
    b = sfserver.SnowflakeBridge(sfserver.BridgeConfig(dest=("127.0.0.1", port), max_streams=3))
    listening = await sfserver.listen(b, "127.0.0.1", 0)
    url = f"ws://127.0.0.1:{listening.port}/"

    async def dial():
        return await WebSocketCarrier.connect(url)
    hog, newcomer = TurboTunnelSession(dial).start(), TurboTunnelSession(dial).start()
    try:
        held = [await hog.open_stream() for _ in range(3)]
        while b.open_streams < 3:
            await asyncio.sleep(0.01)
        reader, writer = await newcomer.open_stream()
        writer.write(b"D10\n")
        assert len(await asyncio.wait_for(reader.readexactly(42), 10)) == 42
        assert b.stats.evicted_streams == 1 and b.open_streams <= 3
        assert await asyncio.wait_for(held[0][0].read(), 10) == b""  # the hog's oldest
        held[2][1].write(b"D10\n")  # its newest carries on
        assert len(await asyncio.wait_for(held[2][0].readexactly(42), 10)) == 42
    finally:
        await hog.close()
        await newcomer.close()
        await listening.aclose()
        srv.close()


async def test_the_caps_and_http_limits_are_options_that_reach_the_listener():
    cfg = sfserver.config_from_options({"max-clients": "300", "max-streams": "40",
                                        "max-streams-per-client": "2",
                                        "http-max-connections": "90", "queue-timeout": "5"})
    assert (cfg.max_clients, cfg.max_streams, cfg.max_streams_per_client) == (300, 40, 2)
    assert cfg.queue_timeout_s == 5.0
    listening = await sfserver.listen(sfserver.SnowflakeBridge(cfg), "127.0.0.1", 0)
    try:
        assert listening.guard.limits.max_connections == 90
    finally:
        await listening.aclose()


@pytest.mark.parametrize("options, complaint", [
    ({"max-streams": "0"}, "max-streams must be a whole number of at least 1"),
    ({"http-keepalive": "-2"}, "http-keepalive must be a positive number"),
    ({"max-client": "3"}, "unknown option 'max-client'"),
])
def test_a_bad_option_is_refused_in_one_line(options, complaint):
    with pytest.raises(ValueError, match=f"^snowflake server: {complaint}"):
        sfserver.server_factory_from_args(options)


def test_the_command_line_takes_every_cap(capsys):
    with pytest.raises(SystemExit) as exit_:
        sfserver.main(["--listen", "127.0.0.1:0", "--dest", "127.0.0.1:9",
                       "--max-streams-per-client", "x"])
    assert exit_.value.code == 2
    assert "max-streams-per-client must be a whole number" in capsys.readouterr().err
