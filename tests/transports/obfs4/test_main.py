"""`python -m transports.obfs4 client|server` works without tor."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time

from ptcommon.events import count_events
from tests.support.echo import echo
from transports.obfs4.statefile import load_or_create
from transports.pt import socks5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc: subprocess.Popen) -> dict:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if count_events(line, "ready"):
            return json.loads(line)
    raise AssertionError("no ready event")


async def test_direct_use_client_and_server(tmp_path):
    upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
    up_port = upstream.sockets[0].getsockname()[1]
    bridge, socks_port = free_port(), free_port()
    state = tmp_path / "state"
    server = subprocess.Popen(
        [sys.executable, "-m", "transports.obfs4", "server", "--listen", f"127.0.0.1:{bridge}",
         "--upstream", f"127.0.0.1:{up_port}", "--state", str(state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    client = subprocess.Popen(
        [sys.executable, "-m", "transports.obfs4", "client", "--socks",
         f"127.0.0.1:{socks_port}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        await asyncio.to_thread(wait_ready, server)
        await asyncio.to_thread(wait_ready, client)
        assert (state / "obfs4_bridgeline.txt").exists()
        args = load_or_create(state).client_args()
        r, w = await asyncio.open_connection("127.0.0.1", socks_port)
        await socks5.client_connect(r, w, "127.0.0.1", bridge, args)
        payload = bytes(range(256)) * 400
        w.write(payload)
        await w.drain()
        got = await asyncio.wait_for(r.readexactly(len(payload)), 10)
        assert got == payload
        w.close()
    finally:
        for p in (client, server):
            p.terminate()
            assert p.wait(10) == 0
        upstream.close()
