"""Our client and our server on loopback: over the server's own TLS (pinned, or
checked for cert-domain=), and in plain HTTP behind a front that adds
X-Forwarded-For, as a real deployment's web server does."""

from __future__ import annotations

import asyncio
import base64
import os
import re

from transports.webtunnel.args import ClientArgs
from transports.webtunnel.client import WebTunnelClientFactory
from transports.webtunnel.server import WebTunnelServerFactory, config_from_options
from transports.webtunnel.tlsdial import chain_hash

UP, DOWN = os.urandom(1 << 20), os.urandom(700_000)


class Bridge:
    """The handoff: reads the whole upload while sending a different download.
    By length, not EOF: asyncio's TLS streams cannot half-close."""

    def __init__(self) -> None:
        self.addresses: list[str] = []
        self.uploads: list[bytes] = []
        self.done = asyncio.Event()

    async def __call__(self, inner, client_addr: str) -> None:
        reader, writer = inner
        self.addresses.append(client_addr)

        async def send() -> None:
            writer.write(DOWN)
            await writer.drain()

        sender = asyncio.create_task(send())
        self.uploads.append(await reader.readexactly(len(UP)))
        await sender
        writer.close()
        self.done.set()


async def exchange(factory: WebTunnelClientFactory) -> bytes:
    reader, writer = await factory.dial("192.0.2.1", 443)  # the placeholder address

    async def send() -> None:
        writer.write(UP)
        await writer.drain()

    sender = asyncio.create_task(send())
    got = await asyncio.wait_for(reader.readexactly(len(DOWN)), 20)
    await sender
    writer.close()
    return got


async def start_bridge(options: dict[str, str]) -> tuple[Bridge, int]:
    bridge = Bridge()
    factory = WebTunnelServerFactory(*config_from_options(options))
    listening = await factory.listen("127.0.0.1", 0, bridge)
    return bridge, listening.port


async def test_over_tls_with_the_chain_pinned(pki):
    bridge, port = await start_bridge({"url": "https://bridge.test/s3cret",
                                       "cert": str(pki.chain_file), "key": str(pki.key_file)})
    pin = base64.b64encode(chain_hash(pki.chain_der)).decode()
    args = ClientArgs.parse({"url": "https://bridge.test/s3cret", "ver": "0.0.3",
                             "addr": f"127.0.0.1:{port}", "cert": pin})
    assert await exchange(WebTunnelClientFactory(args)) == DOWN
    await asyncio.wait_for(bridge.done.wait(), 5)
    assert bridge.uploads == [UP]
    assert re.fullmatch(r"127\.0\.0\.1:\d+", bridge.addresses[0])


async def test_over_tls_checked_for_cert_domain(pki):
    bridge, port = await start_bridge({"url": "https://hidden.example/x",
                                       "cert": str(pki.chain_file), "key": str(pki.key_file)})
    args = ClientArgs.parse({"url": "https://hidden.example/x", "addr": f"127.0.0.1:{port}",
                             "cert-domain": "bridge.test"})
    assert await exchange(WebTunnelClientFactory(args, cafile=str(pki.ca_file))) == DOWN
    await asyncio.wait_for(bridge.done.wait(), 5)
    assert bridge.uploads == [UP]


async def front(upstream_port: int, client_ip: str) -> asyncio.Server:
    """A toy reverse proxy: adds X-Forwarded-For to the request head, then splices."""
    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        up_writer.write(head[:-2] + f"X-Forwarded-For: {client_ip}\r\n\r\n".encode())
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        writer.close()
        up_writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def test_behind_a_front_tor_hears_of_the_forwarded_address():
    bridge, port = await start_bridge({"url": "http://bridge.test/s3cret"})
    edge = await front(port, "198.51.100.23")
    edge_port = edge.sockets[0].getsockname()[1]
    args = ClientArgs.parse({"url": "http://bridge.test/s3cret",
                             "addr": f"127.0.0.1:{edge_port}"})
    assert await exchange(WebTunnelClientFactory(args)) == DOWN
    await asyncio.wait_for(bridge.done.wait(), 5)
    assert bridge.uploads == [UP]
    assert bridge.addresses == ["198.51.100.23:60000"]
    edge.close()
