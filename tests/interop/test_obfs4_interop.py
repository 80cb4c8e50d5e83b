"""obfs4 interop with Debian's obfs4proxy 0.0.14 and with lyrebird (Tor's current PT,
built by ``scripts/setup --peers``), both ways, over Tor PT managed mode.

ptadapter plays tor's part (the PT parent): ``ServerAdapter`` starts a bridge
(``python -m transports.pt`` or obfs4proxy) in front of an ORPort stand-in on
loopback, and ``ClientAdapter`` starts the other implementation as the client PT.
The bridge's ``cert`` and ``iat-mode`` go from its ``SMETHOD ... ARGS:`` line to
the client as SOCKS arguments, as tor does with a bridge line
(docs/transports/pt.md §3, §4; docs/transports/obfs4.md §8.1).

Each exchange is full duplex and byte-exact: the test sends ``up`` bytes through
the client PT while the ORPort sends ``down`` bytes back, at the same time; both
ends compare the SHA-256 of what arrived with what was sent. With obfs4proxy,
iat-mode 0 moves 50 MB each way; iat-modes 1 and 2 (where obfs4proxy itself
manages only ~0.23 and ~0.11 MB/s, docs/transports/obfs4.md §4.3) move 1 MB each
way, both modes at once. lyrebird's pairs move 10 MB and 200 kB.

Last, our server takes over obfs4proxy's state directory: same cert in its
SMETHOD line as in obfs4proxy's ``obfs4_bridgeline.txt``, and an obfs4proxy
client using that bridge line gets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support import peers
from transports.obfs4.statefile import load_or_create

ptadapter = pytest.importorskip("ptadapter")

OBFS4PROXY = shutil.which("obfs4proxy") or (
    "/usr/bin/obfs4proxy" if os.access("/usr/bin/obfs4proxy", os.X_OK) else None)
OURS = [sys.executable, "-m", "transports.pt"]
THEIRS = [OBFS4PROXY or "obfs4proxy"]
LYREBIRD = peers.path_or_none("lyrebird")
IMPLS = {"ours": OURS, "obfs4proxy": THEIRS, "lyrebird": [LYREBIRD or "lyrebird"]}
BULK = 50_000_000  # iat-mode 0, each way
PACED = 1_000_000  # iat-modes 1 and 2, each way
# lyrebird's obfs4 is obfs4proxy's code carried on; its pairs move less (CI's lab
# tier pays for every peer test), enough to cross many frames and, paced, many
# iat delays: ~3 s instead of ~10 s a pair.
SIZES = {"obfs4proxy": (BULK, PACED), "lyrebird": (10_000_000, 200_000)}
CHUNK = 1 << 20

pytestmark = [pytest.mark.interop]
NEEDS_OBFS4PROXY = pytest.mark.skipif(OBFS4PROXY is None, reason="obfs4proxy not installed")
NEEDS_LYREBIRD = peers.needs("lyrebird")


def payload(label: str, size: int) -> bytes:
    """Deterministic incompressible test data."""
    return random.Random(label).randbytes(size)


class OrPort:
    """The ORPort stand-in: one connection at a time reads ``up_len`` bytes (hashing
    them) while sending ``down``; it closes when both are done."""

    def __init__(self, up_len: int, down: bytes) -> None:
        self.up_len, self.down = up_len, down
        self.result: asyncio.Future[tuple[int, bytes]] | None = None
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> OrPort:
        self.result = asyncio.get_running_loop().create_future()
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=CHUNK)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def sink() -> tuple[int, bytes]:
            digest, got = hashlib.sha256(), 0
            while got < self.up_len:
                data = await reader.read(CHUNK)
                if not data:
                    break
                digest.update(data)
                got += len(data)
            return got, digest.digest()

        async def source() -> None:
            view = memoryview(self.down)
            for i in range(0, len(view), CHUNK):
                writer.write(view[i:i + CHUNK])
                await writer.drain()

        try:
            got, _ = await asyncio.gather(sink(), source())
            if self.result is not None and not self.result.done():
                self.result.set_result(got)
        except Exception as exc:  # noqa: BLE001 - reported through the future
            if self.result is not None and not self.result.done():
                self.result.set_exception(exc)
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def bridge(impl: str, state: Path, orport: int,
                 iat_mode: int | None) -> AsyncIterator[tuple[int, dict[str, str]]]:
    """A server PT under ptadapter: (its obfs4 port, its SMETHOD ARGS)."""
    if impl in ("obfs4proxy", "lyrebird") and not (state / "obfs4_state.json").exists():
        # obfs4proxy's own seeds put length 0 in ~3 % of tables, and it panics
        # on drawing 0 in iat-mode 2; ours never do (statefile.paranoid_safe_seed).
        # lyrebird draws its seeds the same way.
        load_or_create(state)
    srv = ptadapter.ServerAdapter(IMPLS[impl], state, "127.0.0.1", orport)
    options = None if iat_mode is None else {"iat-mode": str(iat_mode)}
    srv.add_transport("obfs4", "127.0.0.1", 0, options)
    async with srv:
        smethod = srv.get_transport("obfs4")
        yield smethod.port, smethod.parse_args()


@contextlib.asynccontextmanager
async def client_pt(impl: str, state: Path) -> AsyncIterator[ptadapter.ClientAdapter]:
    async with ptadapter.ClientAdapter(IMPLS[impl], state, ["obfs4"]) as cli:
        yield cli


def socks_args(args: dict[str, str]) -> dict[str, str]:
    """What tor passes from a bridge line: cert and iat-mode."""
    return {"cert": args["cert"], "iat-mode": args["iat-mode"]}


async def exchange(cli: ptadapter.ClientAdapter, port: int, args: dict[str, str],
                   orport: OrPort, up: bytes, timeout: float) -> str:
    """Send ``up`` and receive the ORPort's ``down`` at once; assert both byte-exact."""
    assert orport.result is not None
    t0 = time.monotonic()
    async with asyncio.timeout(timeout):
        reader, writer = await cli.open_transport_connection(
            "obfs4", "127.0.0.1", port, socks_args(args), limit=CHUNK)
        try:
            async def send() -> None:
                view = memoryview(up)
                for i in range(0, len(view), CHUNK):
                    writer.write(view[i:i + CHUNK])
                    await writer.drain()

            async def receive() -> tuple[int, bytes]:
                digest, got = hashlib.sha256(), 0
                while got < len(orport.down):
                    data = await reader.read(CHUNK)
                    if not data:
                        break
                    digest.update(data)
                    got += len(data)
                return got, digest.digest()

            _, (down_got, down_digest) = await asyncio.gather(send(), receive())
            up_got, up_digest = await orport.result
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    elapsed = time.monotonic() - t0
    assert (up_got, down_got) == (len(up), len(orport.down)), "short transfer"
    assert up_digest == hashlib.sha256(up).digest(), "client→server bytes differ"
    assert down_digest == hashlib.sha256(orport.down).digest(), "server→client bytes differ"
    return f"{len(up) / 1e6:.1f} MB each way in {elapsed:.1f} s"


PAIRS = [pytest.param("ours", "obfs4proxy", id="ours-client-to-obfs4proxy-server",
                      marks=NEEDS_OBFS4PROXY),
         pytest.param("obfs4proxy", "ours", id="obfs4proxy-client-to-ours-server",
                      marks=NEEDS_OBFS4PROXY),
         pytest.param("ours", "lyrebird", id="ours-client-to-lyrebird-server",
                      marks=NEEDS_LYREBIRD),
         pytest.param("lyrebird", "ours", id="lyrebird-client-to-ours-server",
                      marks=NEEDS_LYREBIRD)]


def sizes(client: str, server: str) -> tuple[int, int]:
    """(bulk, paced) bytes each way for a pair (the real peer in it decides)."""
    return SIZES[server if client == "ours" else client]


@pytest.mark.parametrize(("client", "server"), PAIRS)
async def test_iat_mode_0_bulk_both_ways_byte_exact(tmp_path, client, server):
    bulk, _ = sizes(client, server)
    up, down = payload(f"{client}-up", bulk), payload(f"{server}-down", bulk)
    async with OrPort(len(up), down) as orport, \
            bridge(server, tmp_path / "server", orport.port, 0) as (port, args), \
            client_pt(client, tmp_path / "client") as cli:
        assert args["iat-mode"] == "0" and len(args["cert"]) == 70
        print(f"\n[{client} → {server}, iat-mode 0] "
              f"{await exchange(cli, port, args, orport, up, timeout=120)}")


@pytest.mark.parametrize(("client", "server"), PAIRS)
async def test_iat_modes_1_and_2_both_ways_byte_exact(tmp_path, client, server):
    """Both modes at once (each is sleep-bound: ~10 s for 1 MB at obfs4proxy's iat 2 rate)."""
    _, paced = sizes(client, server)

    async def one(mode: int) -> str:
        up, down = payload(f"{client}-up-{mode}", paced), payload(f"{server}-down-{mode}", paced)
        async with OrPort(len(up), down) as orport, \
                bridge(server, tmp_path / f"server-{mode}", orport.port, mode) as (port, args):
            assert args["iat-mode"] == str(mode)
            return f"iat-mode {mode}: {await exchange(cli, port, args, orport, up, timeout=60)}"

    async with client_pt(client, tmp_path / "client") as cli:
        for line in await asyncio.gather(one(1), one(2)):
            print(f"\n[{client} → {server}] {line}", end="")


def bridge_line_args(state: Path) -> dict[str, str]:
    """cert and iat-mode from obfs4proxy's ``obfs4_bridgeline.txt``
    (docs/transports/obfs4.md §6.2)."""
    lines = [ln for ln in (state / "obfs4_bridgeline.txt").read_text().splitlines()
             if ln.startswith("Bridge obfs4 ")]
    assert len(lines) == 1, lines
    # "Bridge obfs4 <IP ADDRESS>:<PORT> <FINGERPRINT> cert=... iat-mode=0"
    return dict(field.split("=", 1) for field in lines[0].split() if "=" in field)


@NEEDS_OBFS4PROXY
async def test_our_server_takes_over_obfs4proxys_state_dir(tmp_path):
    state = tmp_path / "bridge-state"
    up, down = payload("state-up", PACED), payload("state-down", PACED)
    async with OrPort(len(up), down) as orport:
        async with bridge("obfs4proxy", state, orport.port, None) as (_, theirs):
            pass
        line = bridge_line_args(state)
        assert line["cert"] == theirs["cert"] and line["iat-mode"] == theirs["iat-mode"]

        async with bridge("ours", state, orport.port, None) as (port, ours):
            assert ours["cert"] == line["cert"]
            assert ours["iat-mode"] == line["iat-mode"]
            async with client_pt("obfs4proxy", tmp_path / "client") as cli:
                print(f"\n[obfs4proxy client, bridge line → ours on obfs4proxy's state] "
                      f"{await exchange(cli, port, line, orport, up, timeout=30)}")

    # And back: obfs4proxy still reads the state directory after our server used it.
    async with OrPort(0, b"") as orport:
        async with bridge("obfs4proxy", state, orport.port, None) as (_, again):
            assert again["cert"] == line["cert"]
