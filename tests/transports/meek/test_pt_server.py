"""The meek PT in server mode under ptadapter (tor's part): each session reaches the
Extended ORPort with TRANSPORT=meek and the edge-reported client address, over plain
HTTP (behind a CDN) or the server's own TLS."""

from __future__ import annotations

import asyncio
import os
import sys

import aiohttp
import pytest

ptadapter = pytest.importorskip("ptadapter")

from ptlab.services.ca import LabCA  # noqa: E402
from tests.support.echo import echo  # noqa: E402


async def echo_orport(seen: asyncio.Queue):
    async def on_connection(r, w, info):
        await seen.put(info)
        await echo(r, w)
    return on_connection


async def exchange(http: aiohttp.ClientSession, url: str, headers: dict, payload: bytes,
                   **kw) -> bytes:
    """POST the payload in 64 KiB bodies, then poll until it all came back."""
    got = bytearray()
    for i in range(0, len(payload), 65536):
        async with http.post(url, data=payload[i:i + 65536], headers=headers, **kw) as r:
            assert r.status == 200
            got += await r.read()
    for _ in range(200):
        if len(got) >= len(payload):
            break
        async with http.post(url, data=b"", headers=headers, **kw) as r:
            got += await r.read()
        await asyncio.sleep(0.01)
    return bytes(got)


@pytest.mark.parametrize("tls", [False, True])
async def test_sessions_reach_the_extended_orport_with_the_edge_address(tmp_path, tls):
    seen: asyncio.Queue = asyncio.Queue()
    options = {"trusted-edge": "127.0.0.1"}
    ssl_kw: dict = {}
    if tls:
        ca = LabCA.load_or_create(tmp_path / "ca")
        cert, key = ca.issue(["meek.test"], ["127.0.0.1"], "meek")
        options.update(cert=str(cert), key=str(key))
        ssl_kw = {"ssl": ca.client_ssl_context()}
    ext = ptadapter.ExtServerAdapter([sys.executable, "-m", "transports.pt"], tmp_path / "s",
                                     await echo_orport(seen))
    ext.add_transport("meek", "127.0.0.1", 0, options)
    async with ext:
        b = ext.get_transport("meek")
        url = f"{'https' if tls else 'http'}://{b.host}:{b.port}/"
        payload = os.urandom(200_000)
        async with aiohttp.ClientSession() as http:
            got = await exchange(http, url, {"X-Session-Id": "a1b2c3d4e5f6a7b8",
                                             "Meek-IP": "198.18.0.9"}, payload, **ssl_kw)
            async with http.get(url, **ssl_kw) as r:  # the decoy, over the same server
                assert r.status == 200 and "happy little web server" in await r.text()
        info = await asyncio.wait_for(seen.get(), 5)
    assert got == payload
    assert info.transport == "meek"
    assert (str(info.host), info.port) == ("198.18.0.9", 1)


async def test_bad_server_options_are_reported_to_tor(tmp_path):
    ext = ptadapter.ExtServerAdapter([sys.executable, "-m", "transports.pt"], tmp_path / "s",
                                     lambda r, w, i: None)
    ext.add_transport("meek", "127.0.0.1", 0, {"staleness": "soon"})
    async with ext:
        with pytest.raises(Exception, match="staleness"):
            ext.get_transport("meek")
