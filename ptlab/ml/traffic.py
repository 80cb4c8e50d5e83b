"""The flows a dataset is made of: transport connections and benign sessions.

Each transport flow is one connection through the transport's SOCKS front
(one obfs4 connection, one meek session, ...) carrying a few HTTP requests
of varied sizes with pauses between them, as a browser's connection would.
Benign sessions are real protocol clients from the client namespace:
HTTPS through the CDN edge (the same edge and port meek uses, which is what
makes meek hard to tell apart), HTTPS and HTTP to the web node, SSH, DNS
over TCP and a binary protocol. Every choice (sizes, request counts, pauses,
session kinds) comes from a seeded RNG, so two runs ask for the same
traffic; only the network's timing differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..plugins.base import Endpoint
from ..services.sshd import SshdFiles
from ..workloads import benign
from ..workloads.http import HTTPError, client_tls, read_body, read_head, send_get
from ..workloads.tunnel import open_tunnel

# Benign session kinds and their weights in the mix: mostly web, as on a real
# network. The binary protocol sends 1 KiB of random bytes after a 6-byte
# header: the random-looking benign traffic an entropy test cannot excuse.
# Names benign users reach on the CDN edge: its own sites and the front domains
# (a front is a popular site: ordinary users visit it too, which is what makes
# blocking it costly). Their lengths differ, as real names do.
EDGE_NAMES = ("www.benign.lab", "news.benign.lab", "front.lab", "assets.lab")
BENIGN_KINDS = {"https-edge": 0.4, "https-web": 0.15, "http": 0.2, "ssh": 0.1,
                "binary": 0.04, "dns-tcp": 0.11}


@dataclass(frozen=True)
class Plan:
    """What one flow asks for: request sizes and the pause before each request."""

    sizes: tuple[int, ...]
    pauses_s: tuple[float, ...]


def plan(rng: random.Random, max_requests: int = 4, min_size: int = 300,
         max_size: int = 200_000) -> Plan:
    """A few requests with log-uniform sizes and short think times."""
    n = rng.randint(1, max_requests)
    lo, hi = math.log(min_size), math.log(max_size)
    sizes = tuple(int(math.exp(rng.uniform(lo, hi))) for _ in range(n))
    pauses = tuple(0.0 if i == 0 else rng.choice((0.0, 0.01, 0.05, 0.2)) for i in range(n))
    return Plan(sizes, pauses)


async def _requests(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, p: Plan,
                    host: str, timeout: float) -> int:
    got = 0
    for i, (size, pause) in enumerate(zip(p.sizes, p.pauses_s, strict=True)):
        if pause:
            await asyncio.sleep(pause)
        await send_get(writer, f"/bulk?size={size}&seed={i}", host,
                       keep_alive=i + 1 < len(p.sizes))
        resp = await asyncio.wait_for(read_head(reader), timeout)
        if resp.status != 200:
            raise HTTPError(f"HTTP {resp.status}")
        got += await read_body(reader, resp, idle_timeout=timeout)
    return got


async def transport_flow(ns: str, ep: Endpoint, p: Plan, timeout: float = 10.0) -> int:
    """One connection through the transport; returns the body bytes received (over
    HTTPS inside the transport when the endpoint says so: ``inner_tls_ca``)."""
    reader, writer = await open_tunnel(ns, ep, timeout)
    try:
        return await _requests(reader, writer, p, "web.lab", timeout)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def browse(ns: str, ip: str, port: int, host: str, ctx: ssl.SSLContext | None, p: Plan,
                 timeout: float = 10.0) -> int:
    """A keep-alive HTTP(S) session of the planned requests straight to a server."""
    sock = await benign.connect_in(ns, ip, port)
    reader, writer = await asyncio.open_connection(
        sock=sock, ssl=ctx, server_hostname=host if ctx else None,
        ssl_handshake_timeout=timeout if ctx else None)
    try:
        return await _requests(reader, writer, p, host, timeout)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def benign_session(kind: str, ns: str, targets: benign.BenignTargets, rng: random.Random,
                   ssh_files: SshdFiles | None, timeout: float = 10.0,
                   edge_v6: str | None = None) -> Callable[[], Awaitable[object]]:
    """A factory for one benign session of `kind` (see :data:`BENIGN_KINDS`).

    Edge sessions use the edge's IPv4 or IPv6 address at random when `edge_v6`
    is given: meek resolves the front's name and may use either, and the
    address family (through the MSS) must not be what tells them apart."""
    if kind == "https-edge":
        ip, port, _, ca = targets.https[0]
        host = rng.choice(EDGE_NAMES)
        if edge_v6 and rng.random() < 0.5:
            ip = edge_v6
        p = plan(rng, max_requests=6)
        return lambda: browse(ns, ip, port, host, client_tls(ca), p, timeout)
    if kind == "https-web":
        ip, port, host, ca = targets.https[-1]
        p = plan(rng, max_requests=4)
        return lambda: browse(ns, ip, port, host, client_tls(ca), p, timeout)
    if kind == "http":
        ip, port, host = targets.http[0]
        p = plan(rng, max_requests=4)
        return lambda: browse(ns, ip, port, host, None, p, timeout)
    if kind == "ssh":
        assert targets.ssh
        sip, sport = targets.ssh
        return lambda: benign.ssh_session(ns, sip, sport, ssh_files, timeout)
    if kind == "binary":
        assert targets.binary
        bip, bport = targets.binary
        return lambda: benign.binary_exchange(ns, bip, bport)
    if kind == "dns-tcp":
        assert targets.dns
        dip, dport = targets.dns
        return lambda: benign.dns_over_tcp(ns, dip, dport, targets.dns_name, targets.dns_type)
    raise ValueError(f"unknown benign session kind {kind!r}")


def pick_kinds(rng: random.Random, n: int) -> list[str]:
    kinds, weights = zip(*BENIGN_KINDS.items(), strict=True)
    return rng.choices(kinds, weights, k=n)


async def run_limited(jobs: list[Callable[[], Awaitable[object]]], concurrency: int,
                      timeout: float) -> list[BaseException | None]:
    """Run `jobs` with at most `concurrency` at once; the error of each, or None."""
    sem = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[object]]) -> BaseException | None:
        async with sem:
            try:
                async with asyncio.timeout(timeout):
                    await job()
            except (OSError, HTTPError, TimeoutError, asyncio.IncompleteReadError, ValueError,
                    benign.FlowError) as exc:
                return exc
            return None

    return list(await asyncio.gather(*(one(j) for j in jobs)))
