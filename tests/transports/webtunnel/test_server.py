"""The server on loopback: what it answers, what it silently closes, its budgets and logs."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.support.echo import echo
from transports.webtunnel.server import (
    ServerConfig,
    WebTunnelServer,
    WebTunnelServerFactory,
    config_from_options,
    listen,
)
from transports.webtunnel.upgrade import RESPONSE

GOOD = (b"GET /secret HTTP/1.1\r\nHost: bridge.example\r\nUser-Agent: Go-http-client/1.1\r\n"
        b"Connection: upgrade\r\nUpgrade: websocket\r\n\r\n")


class Tunnels:
    """A handoff that echoes every tunnel and remembers the client addresses."""

    def __init__(self) -> None:
        self.addresses: list[str] = []

    async def __call__(self, inner, client_addr: str) -> None:
        self.addresses.append(client_addr)
        await echo(*inner)


async def start(**kw) -> tuple[WebTunnelServer, int, Tunnels]:
    tunnels = Tunnels()
    server = WebTunnelServer(ServerConfig("https://bridge.example/secret", **kw), tunnels)
    listening = await listen(server, "127.0.0.1", 0)
    return server, listening.port, tunnels


async def closed_silently(port: int, data: bytes, eof: bool = False) -> bytes:
    """Send ``data`` (then EOF if asked) and return everything the server sends
    before it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    if eof:
        writer.write_eof()
    try:
        return await asyncio.wait_for(reader.read(), 5)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


async def upgrade_and_echo(port: int, request: bytes = GOOD, extra: bytes = b"") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request + extra)
    assert await asyncio.wait_for(reader.readexactly(len(RESPONSE)), 5) == RESPONSE
    writer.write(b"ping")
    writer.write_eof()
    got = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return got


async def test_an_upgrade_is_answered_with_the_exact_101_and_relayed():
    server, port, tunnels = await start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(GOOD)
    assert await asyncio.wait_for(reader.readexactly(len(RESPONSE)), 5) == RESPONSE
    writer.write(b"ping")
    assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
    # Without X-Forwarded-For, tor hears of the TCP peer.
    assert tunnels.addresses == [f"127.0.0.1:{writer.get_extra_info('sockname')[1]}"]
    assert server.stats.upgraded == 1
    writer.close()


async def test_bytes_sent_with_the_request_are_not_lost():
    _, port, _ = await start()
    assert await upgrade_and_echo(port, extra=b"first words, ") == b"first words, ping"


async def test_method_path_and_host_are_not_checked():
    _, port, _ = await start()
    odd = b"POST /elsewhere HTTP/1.0\r\nconnection: UPGRADE\r\nupgrade: WebSocket\r\n\r\n"
    assert await upgrade_and_echo(port, odd) == b"ping"


async def test_the_forwarded_address_goes_to_tor():
    _, port, tunnels = await start()
    request = GOOD.replace(b"\r\n\r\n", b"\r\nX-Forwarded-For: 203.0.113.9, 10.1.1.1\r\n\r\n")
    assert await upgrade_and_echo(port, request) == b"ping"
    assert tunnels.addresses == ["203.0.113.9:60000"]


@pytest.mark.parametrize("data", [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64) + b"\r\n\r\n",  # a ClientHello
    b"GET / HTTP/1.1\r\nHost: bridge.example\r\n\r\n",  # an ordinary request
    b"GET /secret HTTP/1.1\r\nConnection: Upgrade, keep-alive\r\nUpgrade: websocket\r\n\r\n",
    b"GET /secret HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n",
    b"GET /secret HTTP/1.1\r\nConnection : upgrade\r\nUpgrade: websocket\r\n\r\n",
    b"\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.2\r\n",  # then EOF
])
async def test_anything_but_an_upgrade_is_closed_without_an_answer(data):
    server, port, tunnels = await start()
    assert await closed_silently(port, data, eof=data.startswith(b"SSH")) == b""
    assert tunnels.addresses == [] and server.stats.refused == 1
    assert await upgrade_and_echo(port) == b"ping"  # and the next client is served


async def test_an_oversized_head_is_closed_without_an_answer():
    server, port, _ = await start(max_head_bytes=1024)
    flood = b"GET / HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 200 + b"\r\n"
    assert await closed_silently(port, flood * 10 + b"\r\n") == b""
    assert server.stats.refused == 1
    assert await upgrade_and_echo(port) == b"ping"


async def test_a_slow_head_meets_the_deadline():
    server, port, _ = await start(handshake_timeout_s=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await closed_silently(port, b"GET /secret HTTP/1.1\r\nConnection: upg") == b""
    assert 0.15 < loop.time() - started < 3
    assert server.stats.refused == 1
    assert await upgrade_and_echo(port) == b"ping"


async def test_waiting_connections_are_capped_oldest_first():
    server, port, _ = await start(max_unauthenticated=2)
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    # The third arrival pushes out the first; the other two wait on.
    assert await asyncio.wait_for(idle[0][0].read(), 5) == b""
    await asyncio.sleep(0.05)
    assert not idle[1][0].at_eof() and not idle[2][0].at_eof()
    assert len(server.gate.unauthenticated) == 2
    for _, w in idle:
        w.close()


async def test_a_refusal_is_one_quiet_line_without_the_client_address(caplog):
    caplog.set_level(logging.DEBUG, logger="transports.webtunnel")
    _, port, _ = await start()
    assert await closed_silently(port, b"GET / HTTP/1.1\r\n\r\n") == b""
    await asyncio.sleep(0.05)
    records = [r for r in caplog.records if r.name.startswith("transports.webtunnel")]
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.INFO and record.exc_info is None
    assert "127.0.0.1" not in record.getMessage()
    assert "unrecognized request" in record.getMessage()


async def test_a_failing_handoff_ends_one_tunnel_quietly(caplog):
    async def broken(inner, client_addr):
        raise ConnectionRefusedError(111, "Connect call failed ('10.9.9.9', 9)")

    server = WebTunnelServer(ServerConfig("https://b.example/"), broken)
    port = (await listen(server, "127.0.0.1", 0)).port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(GOOD)
    assert await asyncio.wait_for(reader.read(), 5) == RESPONSE  # then closed
    writer.close()
    assert "10.9.9.9" not in caplog.text and "Traceback" not in caplog.text


def test_options():
    cfg, tls = config_from_options({"url": "https://b.example/p"})
    assert (cfg.url, tls) == ("https://b.example/p", None)
    assert 16 <= cfg.max_unauthenticated <= 4096
    with pytest.raises(ValueError, match="missing url parameter"):
        config_from_options({})
    with pytest.raises(ValueError, match="unknown option 'path'"):
        config_from_options({"url": "https://b.example/p", "path": "/x"})
    with pytest.raises(ValueError, match="cert and key go together"):
        config_from_options({"url": "https://b.example/p", "cert": "c.pem"})
    capped, _ = config_from_options({"url": "https://b.example/p", "max-unauthenticated": "7"})
    assert capped.max_unauthenticated == 7
    for bad in ("0", "-3", "many"):
        with pytest.raises(ValueError, match="max-unauthenticated"):
            config_from_options({"url": "https://b.example/p", "max-unauthenticated": bad})


def test_the_factory_announces_the_synthetic_address_and_url_ver():
    factory = WebTunnelServerFactory(ServerConfig("https://example.com/secretpath"))
    assert factory.smethod_address() == ("2001:db8:f323:c36f:d11b:2932:6f0d:e2ab", 443)
    assert factory.smethod_args() == {"url": "https://example.com/secretpath", "ver": "0.0.3"}
