"""Benign servers on loopback: the binary protocol and the UDP echo."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys

from ptlab.services.benign import BenignServers, binary_frame


async def test_binary_and_udp_echo_on_loopback() -> None:
    servers = BenignServers()
    await servers.start(binary=[("127.0.0.1", 0), ("::1", 0)], udp=[("127.0.0.1", 0)])
    try:
        for host, port in servers.binary_bound:
            reader, writer = await asyncio.open_connection(host, port)
            for size in (0, 1, 3000, 65535):  # several frames per connection
                payload = os.urandom(size)
                writer.write(binary_frame(payload))
                await writer.drain()
                got = await asyncio.wait_for(reader.readexactly(32), 2)
                assert got == hashlib.sha256(payload).digest()
            # Printable bytes are not our protocol: the server hangs up.
            writer.write(b"GET / HTTP/1.1\r\n\r\n")
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 2) == b""
            writer.close()

        loop = asyncio.get_running_loop()
        [(uhost, uport)] = servers.udp_bound
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            await loop.sock_connect(s, (uhost, uport))
            for payload in (b"\xc0" + os.urandom(1199), b"x"):
                await loop.sock_sendall(s, payload)
                assert await asyncio.wait_for(loop.sock_recv(s, 2048), 2) == payload
    finally:
        await servers.close()


async def test_close_ends_idle_connections() -> None:
    servers = BenignServers()
    await servers.start(binary=[("127.0.0.1", 0)])
    [(host, port)] = servers.binary_bound
    reader, writer = await asyncio.open_connection(host, port)
    await asyncio.sleep(0.05)
    await asyncio.wait_for(servers.close(), 2)
    assert await asyncio.wait_for(reader.read(), 2) == b""
    writer.close()


def test_cli_needs_something_to_serve() -> None:
    proc = subprocess.run([sys.executable, "-m", "ptlab.services.benign"],
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 2 and "bad config" in proc.stderr


def test_cli_ready_event_lists_ports() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "ptlab.services.benign",
                             "--binary-listen", "127.0.0.1:0", "--udp-listen", "[::1]:0"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready"
        assert ready["binary"][0].startswith("127.0.0.1:") and ready["udp"][0].startswith("[::1]:")
        proc.terminate()
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
