"""The Conjure station: registrar, phantom datapath and application, in the ISP's namespace.

* **Registrar** (``POST /api/register``, aiohttp): a serialized ``C2SWrapper``
  from the client, usually through the lab's TLS edge (then the client address
  is the last ``X-Forwarded-For`` entry, trusted from the edge only, as
  Conjure's registration server takes it). The registry validates it
  (:mod:`.registration`); IPv4 phantoms pass a liveness test first (4 parallel
  connects to phantom:port, 750 ms; any answer means a live host, and the
  registration is refused); then the datapath lets (client, phantom, port) in.
  Answers: 204, or 400 with the reason. (Conjure runs the registrar as its own
  service and forwards to stations; here they share a process.)
* **Datapath** (:mod:`.stationnet`): registered flows are DNATed to the
  application's listener; everything else for the phantom subnets is dropped.
* **Application**: each accepted connection gets a random 5-10 s deadline.
  Its phantom comes from ``SO_ORIGINAL_DST``; its first bytes must carry a
  registration's tag (:mod:`.wrapping`). A match is relayed to the covert
  address, and the registration counts as used. Anything else is read and
  discarded until the deadline, and closed without a byte sent.
* Registrations expire on the registry's clock; a sweep revokes their rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import random
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from ptcommon.events import EventLog, run_until_stopped
from transports.base import Streams, TransportError
from transports.common.elligator2 import public_key_from_private
from transports.common.hostport import split_hostport
from transports.common.relay import relay
from transports.common.replayfilter import ReplayFilter
from transports.obfs4.transport import Obfs4ServerFactory

from .clientconf import write_assets
from .phantom import PhantomConfig, SubnetGroup
from .registration import MAX_REGISTRATION, Registration, RegistrationError, Registry
from .stationnet import StationNet, StationNetError, original_destination
from .wrapping import NEED_MORE, identify

log = logging.getLogger("conjure-station")

LIVENESS_TIMEOUT_S = 0.75
LIVENESS_PROBES = 4
DEADLINE_S = (5.0, 10.0)
SWEEP_S = 30.0


@dataclass
class StationStats:
    registrations: int = 0
    refused: int = 0
    live_phantoms: int = 0
    connections: int = 0
    matched: int = 0
    discarded: int = 0
    discarded_bytes: int = 0


async def phantom_is_live(address: str, port: int, timeout_s: float = LIVENESS_TIMEOUT_S,
                          probes: int = LIVENESS_PROBES) -> bool:
    """Conjure's liveness test: any connect that does not time out means a live host."""
    async def one() -> bool:
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(address, port), timeout_s)
        except TimeoutError:
            return False
        except OSError:
            return True  # refused or unreachable: something answered
        w.close()
        return True

    return any(await asyncio.gather(*(one() for _ in range(probes))))


@dataclass
class Station:
    registry: Registry
    net: StationNet | None = None
    dial: Callable[[str], Awaitable[Streams]] | None = None
    trusted_edges: tuple[str, ...] = ()
    rng: random.Random = field(default_factory=random.Random)
    deadline_s: tuple[float, float] = DEADLINE_S
    liveness: Callable[[str, int], Awaitable[bool]] = phantom_is_live
    destination: Callable[[asyncio.StreamWriter], tuple[str, int]] = \
        lambda w: original_destination(w.get_extra_info("socket"))
    stats: StationStats = field(default_factory=StationStats)
    events: Callable[..., object] = lambda *a, **k: None  # what it returns is not used
    private_key: bytes | None = None  # the station's X25519 key (prefix tags)
    obfs4_replay: ReplayFilter = field(default_factory=ReplayFilter)

    # -- registrar -------------------------------------------------------------------

    def registrar_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REGISTRATION)
        app.router.add_post("/api/register", self.register)
        return app

    def source(self, request: web.Request) -> str:
        peer = request.remote or ""
        if peer in self.trusted_edges:
            forwarded = request.headers.get("X-Forwarded-For", "")
            last = forwarded.split(",")[-1].strip() if forwarded else ""
            with contextlib.suppress(ValueError):
                return str(ipaddress.ip_address(last))
        return peer

    async def register(self, request: web.Request) -> web.Response:
        body = await request.read()
        source = self.source(request)
        try:
            reg = self.registry.register(body, source)
        except RegistrationError as exc:
            self.stats.refused += 1
            return web.json_response({"error": str(exc)}, status=400)
        for phantom in reg.phantoms:
            if phantom.address.version == 4 and await self.liveness(str(phantom.address),
                                                                     reg.port):
                self.stats.live_phantoms += 1
                self.registry.forget(reg)
                return web.json_response({"error": "phantom is a live host"}, status=400)
        if self.net is not None:
            try:
                for phantom in reg.phantoms:
                    self.net.allow(str(reg.client), str(phantom.address), reg.port)
            except StationNetError as exc:
                log.warning("cannot admit a registration: %s", exc)
                self.registry.forget(reg)
                return web.json_response({"error": "station error"}, status=500)
        self.stats.registrations += 1
        self.events("registration", client=str(reg.client), transport=reg.transport,
                    phantoms=[str(p.address) for p in reg.phantoms], port=reg.port)
        return web.Response(status=204)

    def sweep(self) -> list[Registration]:
        gone = self.registry.expire()
        if self.net is not None:
            for reg in gone:
                for phantom in reg.phantoms:
                    self.net.revoke(str(reg.client), str(phantom.address), reg.port)
        return gone

    # -- application -----------------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.rng.uniform(*self.deadline_s)
        try:
            peer = writer.get_extra_info("peername")[0]
            phantom, port = self.destination(writer)
        except (OSError, TypeError):
            writer.close()
            return
        candidates = self.registry.lookup(peer, phantom, port)
        try:
            async with asyncio.timeout_at(deadline):
                found = await self._identify(reader, candidates)
                if found is None:  # read and drop until the deadline or the peer's close
                    while chunk := await reader.read(65536):
                        self.stats.discarded_bytes += len(chunk)
        except TimeoutError:
            found = None
        if found is None:
            self.stats.discarded += 1
            writer.close()
            return
        reg, early = found
        self.stats.matched += 1
        self.registry.mark_used(reg)
        await self._proxy(reg, early, reader, writer)

    async def _identify(self, reader: asyncio.StreamReader,
                        candidates: list[Registration]) -> tuple[Registration, bytes] | None:
        """The registration the first bytes name, and what followed its tag."""
        head = b""
        while (found := identify(candidates, head, self.private_key)) is NEED_MORE:
            chunk = await reader.read(4096)
            if not chunk:
                break
            head += chunk
        if found is None or found is NEED_MORE:
            self.stats.discarded_bytes += len(head)
            return None
        reg, consumed = found
        return reg, head[consumed:]

    async def _proxy(self, reg: Registration, early: bytes, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        assert self.dial is not None
        if reg.transport == "obfs4":
            # obfs4's server answers the handshake it was found by (early holds it),
            # with a fresh length-distribution seed, as Conjure's station does.
            assert reg.obfs4_key is not None
            # Representatives a pre-0.0.12 decoder reads, as Conjure's own obfs4 fork
            # makes them: its client fails the AUTH check on half of ours otherwise.
            factory = Obfs4ServerFactory([reg.obfs4_key], os.urandom(24), 0,
                                         legacy_representatives=True)
            factory.replay = self.obfs4_replay
            try:
                reader, writer = await factory.wrap(reader, writer, initial=early)
            except TransportError:
                return
            early = b""
        try:
            up_r, up_w = await self.dial(reg.covert)
        except OSError as exc:
            log.info("covert %s unreachable: %s", reg.covert, exc)
            writer.close()
            return
        if early:
            up_w.write(early)
        await relay((reader, writer), (up_r, up_w))


async def dial_covert(address: str) -> Streams:
    host, _, port = address.rpartition(":")
    return await asyncio.open_connection(host.strip("[]"), int(port))



def covert_blocklist(station_addrs: set[str]) -> Callable[[str], bool]:
    """Conjure's covert blocklist: loopback, link-local, RFC 1918 and our own addresses."""
    def blocked(host: str) -> bool:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False  # a name: resolved at dial time
        return (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast
                or str(ip) in station_addrs or any(ip in n for n in _RFC1918))
    return blocked


_RFC1918 = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]


async def serve(args, stop: asyncio.Event) -> int:
    event = EventLog("conjure-station").emit

    listen = split_hostport(args.listen)
    listen6 = split_hostport(args.listen6) if args.listen6 else None
    subnets = [s.strip() for s in args.phantoms.split(",") if s.strip()]
    config = PhantomConfig([SubnetGroup.parse(1, subnets, args.randomize_dst_port)])
    registry = Registry(config, args.generation, covert_blocklist({listen[0]}),
                        unused_timeout_s=args.unused_timeout, active_timeout_s=args.active_timeout,
                        serve_v6=listen6 is not None)
    net = StationNet(subnets, listen, listen6)
    try:
        net.install()
    except StationNetError as exc:
        print(f"conjure station: cannot install the datapath: {exc}", file=sys.stderr)
        return 1
    private = None
    if args.private_key:
        try:
            private = bytes.fromhex(Path(args.private_key).read_text().strip())
        except (OSError, ValueError) as exc:
            print(f"conjure station: --private-key: {exc}", file=sys.stderr)
            net.remove()
            return 1
    if args.client_conf:
        if private is None:
            print("conjure station: --client-conf needs --private-key (its public half goes "
                  "in the ClientConf)", file=sys.stderr)
            net.remove()
            return 1
        write_assets(Path(args.client_conf), args.generation, subnets,
                     public_key_from_private(private), args.randomize_dst_port)
    station = Station(registry, net, dial_covert, tuple(args.trusted_edge), events=event,
                      private_key=private)
    servers = [await asyncio.start_server(station.handle, *listen)]
    if listen6:
        servers.append(await asyncio.start_server(station.handle, *listen6))
    runner = web.AppRunner(station.registrar_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, *split_hostport(args.registrar)).start()
    event("ready", listen=args.listen, registrar=args.registrar, phantoms=subnets)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SWEEP_S)
        station.sweep()
    event("stats", **vars(station.stats))
    await runner.cleanup()
    for s in servers:
        s.close()
    net.remove()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m transports.conjure.station``: registrar, datapath and application."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m transports.conjure.station",
                                description=(main.__doc__ or "").partition("\n")[0])
    p.add_argument("--phantoms", required=True, help="comma-separated phantom subnets")
    p.add_argument("--generation", type=int, default=1)
    p.add_argument("--listen", required=True, help="HOST:PORT for DNATed connections (IPv4)")
    p.add_argument("--listen6", help="[HOST]:PORT for DNATed IPv6 connections")
    p.add_argument("--registrar", required=True, help="HOST:PORT for POST /api/register")
    p.add_argument("--trusted-edge", action="append", default=[])
    p.add_argument("--randomize-dst-port", action="store_true")
    p.add_argument("--private-key", help="file with the station's X25519 private key (hex); "
                   "the prefix transport needs it")
    p.add_argument("--client-conf", metavar="DIR",
                   help="write DIR/ClientConf for Conjure's own client (its -assetsdir): "
                        "these phantoms, this generation, the station's public key")
    p.add_argument("--unused-timeout", type=float, default=600.0)
    p.add_argument("--active-timeout", type=float, default=6 * 3600.0)
    args = p.parse_args(argv)
    try:
        for text in (args.listen, args.registrar, *([args.listen6] if args.listen6 else [])):
            split_hostport(text)
        SubnetGroup.parse(1, args.phantoms.split(","))
    except ValueError as exc:
        p.error(str(exc))
    return run_until_stopped("conjure-station", lambda stop: serve(args, stop))


if __name__ == "__main__":
    raise SystemExit(main())
