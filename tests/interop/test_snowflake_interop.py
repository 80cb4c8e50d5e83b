"""Snowflake end to end in the lab, with Debian's 2.5.1 binaries in either slot
(the rig: :mod:`tests.support.snowflakelab`). Bytes are checked with SHA-256 both ways.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import time

import pytest

from tests.support import peers
from tests.support.netlab import default_lab_or_skip
from tests.support.snowflakelab import (
    MB,
    Rig,
    client_addresses,
    our_args,
    socks_open,
    stream_bytes,
    upload_and_download,
)

pytestmark = [pytest.mark.lab, pytest.mark.interop]

needs_debian = pytest.mark.skipif(
    not (shutil.which("snowflake-proxy") and shutil.which("snowflake-client")),
    reason="Debian's snowflake-proxy/-client are not installed")


@pytest.fixture(scope="module")
def sflab(tmp_path_factory):
    yield from default_lab_or_skip(proxies=3)


@pytest.fixture
def rig(sflab, tmp_path):
    r = Rig(sflab, tmp_path)
    try:
        yield r
    finally:
        r.close()


@needs_debian
async def test_debian_proxy_relays_our_client_to_our_bridge(rig, sflab):
    rig.debian_proxy(0)
    port = rig.our_client()
    reader, writer = await socks_open(sflab, port, our_args(rig))
    took = await upload_and_download(reader, writer, 20 * MB)
    writer.close()
    attached = rig.attaches()
    assert attached and attached[0]["proxy"] == sflab.addr("proxy0")
    assert attached[0]["client_ip"] in client_addresses(sflab)  # from the proxy's ?client_ip=
    print(f"debian proxy: 20 MB each way in {took:.1f} s")


@needs_debian
async def test_debian_client_through_our_proxy_and_bridge(rig, sflab):
    rig.our_proxy(0)
    port = rig.debian_client()
    reader, writer = await socks_open(sflab, port, None)
    took = await upload_and_download(reader, writer, 20 * MB)
    writer.close()
    attached = rig.attaches()
    assert attached and attached[0]["proxy"] == sflab.addr("proxy0")
    print(f"debian client: 20 MB each way in {took:.1f} s")


def udp_sockets(pid: int) -> int:
    """UDP sockets (IPv4 and IPv6) that process ``pid`` holds."""
    from pathlib import Path

    inodes = set()
    for table in ("udp", "udp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        inodes |= {line.split()[9] for line in lines}
    fds = Path(f"/proc/{pid}/fd")
    held = []
    for fd in fds.iterdir():
        try:
            held.append(fd.readlink().name)
        except OSError:
            continue
    return sum(1 for h in held if h.startswith("socket:[") and h[8:-1] in inodes)


@needs_debian
async def test_two_clients_are_served_by_two_worker_processes(rig, sflab):
    """``-workers 2``: the proxy polls, each match goes to the least loaded worker, so
    two clients at once are relayed by two processes (each holds its ICE socket),
    byte-exact both ways."""
    from pathlib import Path

    proxy = rig.our_proxy(0, "-workers", "2")
    # Polling before the clients ask: after a match the proxy waits the broker's
    # NextPoll (as 2.14's does), so the second client is matched on its next try,
    # 10 s on; a first try that found no proxy would put 20 s between them, and
    # the first client's idle session may have ended by then.
    rig.wait_available(1)
    ports = [rig.debian_client(i) for i in range(2)]
    streams = [await socks_open(sflab, port, None) for port in ports]
    transfers = [asyncio.create_task(upload_and_download(r, w, 5 * MB, seed=20 + i))
                 for i, (r, w) in enumerate(streams)]
    for _ in range(300):
        if len(rig.attaches()) >= 2:
            break
        await asyncio.sleep(0.1)
    pid = proxy.proc.pid
    workers = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    held = {w: udp_sockets(w) for w in workers}
    took = await asyncio.gather(*transfers)  # each checks its SHA-256 both ways
    for _, w in streams:
        w.close()
    assert len(workers) == 2 and all(n >= 1 for n in held.values()), held
    assert udp_sockets(pid) == 0  # the polling process relays nobody itself
    assert len(rig.attaches()) >= 2  # two sessions at the bridge
    print(f"two clients through two workers: 5 MB each way in {max(took):.1f} s")


async def test_session_survives_killing_the_proxy_in_use(rig, sflab):
    proxies = {sflab.addr(f"proxy{i}"): rig.our_proxy(i) for i in range(3)}
    port = rig.our_client()
    # Three peers at once; a peer silent for 5 s while in use is dropped
    # (Tor's 20 s, shortened so the test stays quick).
    reader, writer = await socks_open(sflab, port, our_args(rig, max="3",
                                                            **{"stale-timeout": "5"}))
    n, seed = 50 * MB, 11
    writer.write(f"D {n} {seed}\n".encode())
    want = hashlib.sha256(b"".join(stream_bytes(seed, n))).hexdigest()
    got, left, killed = hashlib.sha256(), n, None
    last, stall, t0 = time.monotonic(), 0.0, time.monotonic()
    while left:
        chunk = await asyncio.wait_for(reader.read(min(left, 65536)), 120)
        assert chunk, f"stream ended with {left} bytes to go"
        now = time.monotonic()
        if killed is not None:
            stall = max(stall, now - last)
        last = now
        got.update(chunk)
        left -= len(chunk)
        if killed is None and n - left >= 10 * MB:
            active = rig.attaches()[-1]["proxy"]
            killed = active
            proxies[active].proc.kill()
            last = time.monotonic()
    took = time.monotonic() - t0
    writer.close()
    assert got.hexdigest() == want, "not byte-exact after the proxy change"
    used = {a["proxy"] for a in rig.attaches()}
    assert killed in used and len(used) >= 2, used
    print(f"proxy {killed} killed after 10 MB; longest stall {stall:.1f} s; "
          f"50 MB in {took:.1f} s; proxies used {sorted(used)}")
    assert stall < 30


@peers.needs("lyrebird")
async def test_lyrebird_client_through_our_proxy_broker_and_bridge(rig, sflab):
    """lyrebird's Snowflake client (snowflake/v2's client library, the version its
    go.mod requires) rendezvouses with our broker, reaches our proxy over WebRTC and
    our bridge behind it, byte-exact both ways."""
    rig.our_proxy(0)
    rig.wait_available()
    port = rig.lyrebird_client(peers.require("lyrebird"))
    reader, writer = await socks_open(sflab, port, our_args(rig))
    took = await upload_and_download(reader, writer, 5 * MB)
    writer.close()
    attached = rig.attaches()
    assert attached and attached[0]["proxy"] == sflab.addr("proxy0")
    assert attached[0]["client_ip"] in client_addresses(sflab)
    pin = peers.pin("lyrebird")
    assert (f'IMPLEMENTATION="lyrebird" VERSION="{pin.version}"'
            in (rig.out / "lyrebird-client.log").read_text())
    print(f"lyrebird {peers.version('lyrebird')} snowflake: 5 MB each way in {took:.1f} s")
