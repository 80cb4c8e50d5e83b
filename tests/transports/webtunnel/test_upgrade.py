"""The upgrade exchange: the client's exact request, which answers it takes, and the
bytes on either side of the heads."""

from __future__ import annotations

import asyncio

import pytest

from transports.base import TransportError
from transports.webtunnel.args import ClientArgs
from transports.webtunnel.client import WebTunnelClientFactory
from transports.webtunnel.httphead import parse_request
from transports.webtunnel.upgrade import (
    RESPONSE,
    escaped_path,
    forwarded_address,
    request_target,
)

UA = b"User-Agent: Go-http-client/1.1\r\n"
TAIL = b"Connection: upgrade\r\nUpgrade: websocket\r\n\r\n"


def factory(port: int, url: str, **extra: str) -> WebTunnelClientFactory:
    args = ClientArgs.parse({"url": url, "addr": f"127.0.0.1:{port}", **extra})
    return WebTunnelClientFactory(args, handshake_timeout_s=5)


async def answer(text: bytes):
    async def script(reader, writer, peer):
        writer.write(text)
        await writer.drain()
    return script


@pytest.mark.parametrize(("url", "line"), [
    ("http://bridge.example/secret", b"GET /secret HTTP/1.1\r\nHost: bridge.example\r\n"),
    ("http://bridge.example", b"GET / HTTP/1.1\r\nHost: bridge.example\r\n"),
    ("http://Bridge.Example:8080/a/b/?q=1#frag",
     b"GET /a/b/ HTTP/1.1\r\nHost: Bridge.Example\r\n"),
    ("http://bridge.example/a%2Fb;c=d", b"GET /a%2Fb;c=d HTTP/1.1\r\nHost: bridge.example\r\n"),
    ("http://bridge.example/caf\u00e9\"x",
     b"GET /caf%C3%A9%22x HTTP/1.1\r\nHost: bridge.example\r\n"),
    ("http://127.0.0.1:9/p", b"GET /p HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
])
async def test_the_request_is_byte_exact(fake_server, url, line):
    port, peer = await fake_server(await answer(RESPONSE))
    reader, writer = await factory(port, url).dial("192.0.2.1", 443)
    writer.close()
    await asyncio.wait_for(peer.done.wait(), 5)
    assert peer.head == line + UA + TAIL


@pytest.mark.parametrize(("raw", "escaped"), [
    ("", ""), ("/", "/"), ("/a%2fb", "/a%2fb"), ("/!$&'()*+,;=:@[]~", "/!$&'()*+,;=:@[]~"),
    ("/a b", "/a%20b"), ("/%41 b", "/A%20b"), ("/<x>", "/%3Cx%3E"), ("/\u00e9", "/%C3%A9"),
])
def test_path_escaping_follows_go(raw, escaped):
    assert escaped_path(raw) == escaped


@pytest.mark.parametrize(("path", "target"), [
    ("", "/"), ("/", "/"), ("/a", "/a"), ("//x/y", "/y"), ("//x", "/"), ("/a//b", "/a//b"),
])
def test_the_request_target_as_go_builds_it(path, target):
    assert request_target(path) == target


async def test_the_101_is_accepted_and_bytes_after_it_come_first(fake_server):
    async def script(reader, writer, peer):
        writer.write(RESPONSE + b"early bytes")
        await writer.drain()
        writer.write(b" and later ones")

    port, peer = await fake_server(script)
    reader, writer = await factory(port, "http://bridge.example/p").dial("x", 1)
    assert await asyncio.wait_for(reader.readexactly(26), 5) == b"early bytes and later ones"
    writer.write(b"payload")
    writer.write_eof()
    await asyncio.wait_for(peer.done.wait(), 5)
    assert bytes(peer.after) == b"payload"


@pytest.mark.parametrize("response", [
    b"HTTP/1.1 101 Switching Protocols\r\nconnection: UPGRADE\r\nupgrade: WebSocket\r\n"
    b"Sec-WebSocket-Accept: x\r\n\r\n",
    b"HTTP/1.0 101 Switching Protocols\nConnection: upgrade\nUpgrade: websocket\n\n",
])
async def test_other_spellings_go_accepts(fake_server, response):
    port, _ = await fake_server(await answer(response))
    _, writer = await factory(port, "http://bridge.example/p").dial("x", 1)
    writer.close()


@pytest.mark.parametrize("response", [
    b"HTTP/1.1 200 OK\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
    b"HTTP/1.1 101 switching protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols \r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade, keep-alive\r\n"
    b"Upgrade: websocket\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: h2c\r\n"
    b"Upgrade: websocket\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade : websocket\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
    b"",
])
async def test_anything_else_is_refused_with_no_payload_sent(fake_server, response):
    async def script(reader, writer, peer):
        writer.write(response)
        await writer.drain()
        writer.write_eof()

    port, peer = await fake_server(script)
    with pytest.raises(TransportError, match="unrecognized reply|no reply"):
        await factory(port, "http://bridge.example/p").dial("x", 1)
    await asyncio.wait_for(peer.done.wait(), 5)
    assert peer.head.startswith(b"GET /p HTTP/1.1\r\n")
    assert bytes(peer.after) == b""  # the client gave up without a byte of payload


async def test_an_endless_response_head_is_cut_off(fake_server):
    async def script(reader, writer, peer):
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\n")
        for _ in range(200):
            writer.write(b"X-Filler: " + b"a" * 100 + b"\r\n")
        await writer.drain()

    port, peer = await fake_server(script)
    with pytest.raises(TransportError, match="too large"):
        await factory(port, "http://bridge.example/p").dial("x", 1)
    await asyncio.wait_for(peer.done.wait(), 5)
    assert bytes(peer.after) == b""


async def test_a_silent_server_meets_the_handshake_deadline(fake_server):
    async def script(reader, writer, peer):
        await asyncio.sleep(10)

    port, _ = await fake_server(script)
    args = ClientArgs.parse({"url": "http://b.example/", "addr": f"127.0.0.1:{port}"})
    with pytest.raises(TimeoutError):
        await WebTunnelClientFactory(args, handshake_timeout_s=0.2).dial("x", 1)


@pytest.mark.parametrize(("xff", "expect"), [
    ("198.51.100.7", "198.51.100.7:60000"),
    (" 198.51.100.7 , 10.0.0.1", "198.51.100.7:60000"),
    ("2001:db8::9, 10.0.0.1", "[2001:db8::9]:60000"),
    ("unknown, 10.0.0.1", "127.0.0.1:5555"),
    ("fe80::1%eth0", "127.0.0.1:5555"),
    ("", "127.0.0.1:5555"),
    (None, "127.0.0.1:5555"),
])
def test_the_client_address_for_tor(xff, expect):
    head = b"GET / HTTP/1.1\r\n"
    if xff is not None:
        head += f"X-Forwarded-For: {xff}\r\n".encode()
    assert forwarded_address(parse_request(head + b"\r\n"), "127.0.0.1:5555") == expect
