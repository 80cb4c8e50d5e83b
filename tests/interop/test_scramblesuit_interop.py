"""ScrambleSuit interop: Debian obfs4proxy 0.0.14's client (it has no server) through our
server, over Tor PT managed mode under ptadapter, byte-exact both ways at once, first
with a UniformDH handshake and then, on the next connection, redeeming the ticket our
server issued. Our client does the same against our server."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import shutil
import sys

import pytest

ptadapter = pytest.importorskip("ptadapter")

OBFS4PROXY = shutil.which("obfs4proxy")
OURS = [sys.executable, "-m", "transports.pt"]
SIZE = 20_000_000
CHUNK = 1 << 20

pytestmark = [pytest.mark.interop,
              pytest.mark.skipif(OBFS4PROXY is None, reason="obfs4proxy not installed")]


def payload(label: str, size: int) -> bytes:
    return random.Random(label).randbytes(size)


class OrPort:
    """Reads ``up_len`` bytes (hashing them) while sending ``down``, per connection."""

    def __init__(self, up_len: int, down: bytes) -> None:
        self.up_len, self.down = up_len, down
        self.results: asyncio.Queue = asyncio.Queue()

    async def __aenter__(self) -> OrPort:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=CHUNK)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _handle(self, reader, writer) -> None:
        async def sink():
            h, got = hashlib.sha256(), 0
            while got < self.up_len and (data := await reader.read(CHUNK)):
                h.update(data)
                got += len(data)
            return got, h.digest()

        async def source():
            for i in range(0, len(self.down), CHUNK):
                writer.write(self.down[i:i + CHUNK])
                await writer.drain()

        try:
            got, _ = await asyncio.gather(sink(), source())
            await self.results.put(got)
        except Exception as exc:  # noqa: BLE001 - reported through the queue
            await self.results.put(exc)
        finally:
            writer.close()


async def exchange(cli, port: int, args: dict, orport: OrPort, up: bytes) -> None:
    async with asyncio.timeout(120):
        reader, writer = await cli.open_transport_connection(
            "scramblesuit", "127.0.0.1", port, args, limit=CHUNK)

        async def send():
            for i in range(0, len(up), CHUNK):
                writer.write(up[i:i + CHUNK])
                await writer.drain()

        async def receive():
            h, got = hashlib.sha256(), 0
            while got < len(orport.down) and (data := await reader.read(CHUNK)):
                h.update(data)
                got += len(data)
            return got, h.digest()

        _, (down_got, down_digest) = await asyncio.gather(send(), receive())
        up_got, up_digest = await orport.results.get()
        writer.close()
    assert (up_got, down_got) == (len(up), len(orport.down))
    assert up_digest == hashlib.sha256(up).digest()
    assert down_digest == hashlib.sha256(orport.down).digest()


@pytest.mark.parametrize("client", ["obfs4proxy", "ours"])
async def test_uniformdh_then_ticket_20_mb_each_way(tmp_path, client):
    up, down = payload(f"{client}-up", SIZE), payload(f"{client}-down", SIZE)
    async with OrPort(len(up), down) as orport:
        srv = ptadapter.ServerAdapter(OURS, tmp_path / "server", "127.0.0.1", orport.port)
        srv.add_transport("scramblesuit", "127.0.0.1", 0)
        async with srv:
            smethod = srv.get_transport("scramblesuit")
            args = {"password": smethod.parse_args()["password"]}
            assert len(args["password"]) == 32  # base32 of the 20-byte k_B
            cmd = [OBFS4PROXY] if client == "obfs4proxy" else OURS
            state = tmp_path / "client"
            async with ptadapter.ClientAdapter(cmd, state, ["scramblesuit"]) as cli:
                store = state / "scramblesuit_tickets.json"
                assert not store.exists()
                await exchange(cli, smethod.port, args, orport, up)  # UniformDH
                first = json.loads(store.read_text())
                assert len(first) == 1  # the ticket our server issued, stored
                # The client redeems it (a ticket it holds is always used: the Go client
                # cannot fall back once it has sent one, so success means redemption),
                # and our server issues the next one.
                await exchange(cli, smethod.port, args, orport, up)
                second = json.loads(store.read_text())
                assert len(second) == 1 and second != first
