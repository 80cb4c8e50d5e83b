"""The direct transport through the lab-mode processes' code paths, on loopback."""

import argparse
import asyncio
import contextlib

import pytest

from transports import base, lab_mode
from transports.pt import socks5


def test_registry_finds_direct_through_entry_points():
    assert "direct" in base.names()
    assert base.get("direct").name == "direct"
    with pytest.raises(base.TransportError, match="unknown transport"):
        base.get("nope")


async def test_socks_front_to_server_to_upstream():
    # upstream: echo with a prefix
    async def echo(r, w):
        data = await r.read(100)
        w.write(b"echo:" + data)
        await w.drain()
        w.close()

    up = await asyncio.start_server(echo, "127.0.0.1", 0)
    up_port = up.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    srv_args = argparse.Namespace(transport="direct", listen=["127.0.0.1:0"],
                                  upstream=f"127.0.0.1:{up_port}", state=None, arg=[])
    # Pick free ports by binding first.
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    bridge_port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    srv_args.listen = [f"127.0.0.1:{bridge_port}"]
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    socks_port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    cli_args = argparse.Namespace(transport="direct", socks=f"127.0.0.1:{socks_port}",
                                  state=None)
    tasks = [asyncio.create_task(lab_mode.run_server(srv_args, stop)),
             asyncio.create_task(lab_mode.run_client(cli_args, stop))]
    await asyncio.sleep(0.2)
    try:
        r, w = await asyncio.open_connection("127.0.0.1", socks_port)
        await socks5.client_connect(r, w, "127.0.0.1", bridge_port)
        w.write(b"hello")
        await w.drain()
        assert await asyncio.wait_for(r.read(100), 5) == b"echo:hello"
        w.close()
        # A dead bridge gives SOCKS reply 4 (host unreachable), not a hang.
        r, w = await asyncio.open_connection("127.0.0.1", socks_port)
        with pytest.raises(socks5.SocksError) as err:
            await socks5.client_connect(r, w, "127.0.0.1", 1)
        assert err.value.reply == socks5.REP_HOST_UNREACHABLE
        w.close()
    finally:
        stop.set()
        for t in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, 5)
        up.close()
