"""WebTunnel under ``ptlab pt``: the SMETHOD line tor turns into the bridge line, and
a client reaching tor's Extended ORPort through SOCKS, ptadapter playing tor."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import sys

import pytest

from tests.support.echo import echo
from transports.pt import managed
from transports.pt.environment import ServerConfig
from transports.webtunnel.tlsdial import chain_hash

ptadapter = pytest.importorskip("ptadapter")

PT = [sys.executable, "-m", "transports.pt"]
URL = "https://example.com/secretpath"
SYNTHETIC = "2001:db8:f323:c36f:d11b:2932:6f0d:e2ab"


async def test_the_smethod_line_announces_the_synthetic_address(tmp_path, capsys):
    life = managed.Lifetime()
    cfg = ServerConfig(version="1", state_location=tmp_path, transports=["webtunnel"],
                       bindaddrs={"webtunnel": ("127.0.0.1", 0)},
                       options={"webtunnel": {"url": URL}}, orport=("127.0.0.1", 9))
    [listening] = await managed.start_server(cfg, life)
    try:
        out = capsys.readouterr().out.splitlines()
        assert out == [f"SMETHOD webtunnel [{SYNTHETIC}]:443 ARGS:url={URL},ver=0.0.3",
                       "SMETHODS DONE"]
        # ...while the listener is where tor said, and it answers an upgrade.
        reader, writer = await asyncio.open_connection("127.0.0.1", listening.port)
        writer.write(b"GET /secretpath HTTP/1.1\r\nHost: example.com\r\n"
                     b"Connection: upgrade\r\nUpgrade: websocket\r\n\r\n")
        assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 101 ")
        writer.close()
    finally:
        listening.close()


async def test_a_missing_url_is_an_smethod_error(tmp_path, capsys):
    cfg = ServerConfig(version="1", state_location=tmp_path, transports=["webtunnel"],
                       bindaddrs={"webtunnel": ("127.0.0.1", 0)}, orport=("127.0.0.1", 9))
    assert await managed.start_server(cfg, managed.Lifetime()) == []
    assert capsys.readouterr().out.splitlines() == [
        "SMETHOD-ERROR webtunnel missing url parameter", "SMETHODS DONE"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_client_and_server_pts_reach_the_extended_orport(tmp_path, pki):
    seen: asyncio.Queue = asyncio.Queue()

    async def on_connection(reader, writer, info):
        await seen.put(info)
        await echo(reader, writer)

    port = free_port()
    server = ptadapter.ExtServerAdapter(PT, tmp_path / "server", on_connection)
    server.add_transport("webtunnel", "127.0.0.1", port,
                         {"url": URL, "cert": str(pki.chain_file), "key": str(pki.key_file)})
    client = ptadapter.ClientAdapter(PT, tmp_path / "client", ["webtunnel"])
    async with server, client:
        bridge = server.get_transport("webtunnel")
        assert (str(bridge.host), bridge.port) == (SYNTHETIC, 443)
        assert bridge.options == f"ARGS:url={URL},ver=0.0.3"  # ptadapter keeps them raw
        # The bridge line as published, plus where this test's bridge really is.
        args = {"url": URL, "ver": "0.0.3", "addr": f"127.0.0.1:{port}",
                "cert": base64.b64encode(chain_hash(pki.chain_der)).decode()}
        reader, writer = await client.open_transport_connection(
            "webtunnel", bridge.host, bridge.port, args)
        payload = os.urandom(300_000)
        writer.write(payload)
        assert await asyncio.wait_for(reader.readexactly(len(payload)), 20) == payload
        writer.close()
        info = await asyncio.wait_for(seen.get(), 5)
    assert info.transport == "webtunnel"
    assert str(info.host) == "127.0.0.1"
