"""The lab resolver: authoritative for a fixed zone map, over UDP and TCP.

Names inside the lab resolve through this server (docs/architecture.md §1.4). It
answers from its own map, and forwards only the zones it was told to delegate
(``--delegate tunnel.lab=198.18.3.2:9850``) to a lab address, over UDP, as a
recursive resolver follows a delegation: that is how a DNS tunnel's queries reach
its server (docs/lab/transports.md §7.5). Nothing else is forwarded, so no lookup
can leave the lab. Unknown names get NXDOMAIN, malformed queries FORMERR, queries it
will not serve (other classes, zone transfers, a delegated zone over TCP) REFUSED,
a delegate that does not answer in time SERVFAIL, and garbage that does not even
look like a query is dropped silently.

Run: ``python -m ptlab.services.dns --listen 198.18.9.2:53 --zone web.lab=198.18.7.2
--zone-file zones.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import ipaddress
import json
import socket
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from ptcommon.events import EventLog
from ptlab.services.listeners import Listeners
from ptlab.services.main import ConfigError, run_service
from ptlab.services.netutil import bind_udp_tcp_pair, format_hostport, parse_hostport

COMPONENT = "dns"
DEFAULT_LISTEN = ("0.0.0.0:53", "[::]:53")
TTL = 60
TCP_IDLE_TIMEOUT = 30.0
HEADER_LEN = 12
_QR = 0x8000
_RD = 0x0100


@dataclass
class Zone:
    """The zone map: exact names and ``*.suffix`` wildcards, each with addresses."""

    exact: dict[dns.name.Name, list[str]] = field(default_factory=dict)
    wildcards: dict[dns.name.Name, list[str]] = field(default_factory=dict)

    def add(self, name: str, addrs: Iterable[str]) -> None:
        """Add addresses for a name (``*.x.lab`` is a wildcard for every name under x.lab)."""
        clean: list[str] = []
        for a in addrs:
            try:
                clean.append(str(ipaddress.ip_address(str(a).strip())))
            except ValueError:
                raise ConfigError(f"zone entry {name!r}: {a!r} is not an IP address") from None
        try:
            n = dns.name.from_text(name.strip())
        except dns.exception.DNSException as exc:
            raise ConfigError(f"bad zone name {name!r}: {exc}") from None
        if n.labels and n.labels[0] == b"*":
            target, key = self.wildcards, n.parent()
        else:
            target, key = self.exact, n
        bucket = target.setdefault(key, [])
        bucket.extend(a for a in clean if a not in bucket)

    @classmethod
    def from_mapping(cls, names: Mapping[str, Any]) -> Zone:
        zone = cls()
        for name, addrs in names.items():
            if isinstance(addrs, str):
                addrs = [addrs]
            if not isinstance(addrs, list):
                raise ConfigError(f"zone entry {name!r}: expected a list of addresses")
            zone.add(name, addrs)
        return zone

    def lookup(self, qname: dns.name.Name) -> list[str] | None:
        """Addresses for qname, or None if the name does not exist.

        An exact entry wins; otherwise the closest enclosing wildcard. A
        wildcard matches names strictly below its parent, not the parent itself.
        """
        if qname in self.exact:
            return self.exact[qname]
        n = qname
        while len(n.labels) > 1:
            n = n.parent()
            if n in self.wildcards:
                return self.wildcards[n]
        return None


@dataclass
class Reply:
    """A response on the wire plus what the query event reports."""

    wire: bytes
    name: str
    type: str
    rcode: str


def _header_only(wire: bytes, rcode: dns.rcode.Rcode) -> Reply | None:
    """A bare response built from the request header, for queries dnspython cannot parse."""
    if len(wire) < HEADER_LEN:
        return None
    qid, flags = struct.unpack("!HH", wire[:4])
    if flags & _QR:
        return None  # never answer a response: that is how reflection loops start
    opcode = (flags >> 11) & 0xF
    out_flags = _QR | (opcode << 11) | (flags & _RD) | (rcode & 0xF)
    wire_out = struct.pack("!HHHHHH", qid, out_flags, 0, 0, 0, 0)
    return Reply(wire_out, "", "", dns.rcode.to_text(rcode))


def handle_query(wire: bytes, zone: Zone, tcp: bool = False) -> Reply | None:
    """Answer one query on the wire; None means drop it silently. Never raises."""
    try:
        return _answer(wire, zone, tcp)
    except Exception:  # a bug must not take the resolver down; answer FORMERR if we can
        try:
            return _header_only(wire, dns.rcode.FORMERR)
        except Exception:
            return None


def _answer(wire: bytes, zone: Zone, tcp: bool) -> Reply | None:
    if len(wire) < HEADER_LEN:
        return None
    try:
        query = dns.message.from_wire(wire)
    except dns.exception.DNSException:
        return _header_only(wire, dns.rcode.FORMERR)
    if query.flags & dns.flags.QR:
        return None
    if query.opcode() != dns.opcode.QUERY:
        return _header_only(wire, dns.rcode.NOTIMP)
    if len(query.question) != 1:
        return _header_only(wire, dns.rcode.FORMERR)
    q = query.question[0]
    name, rdtype = q.name, q.rdtype
    resp = dns.message.make_response(query, recursion_available=False)
    resp.flags |= dns.flags.AA
    if query.edns > 0:
        resp.set_rcode(dns.rcode.BADVERS)
    elif q.rdclass != dns.rdataclass.IN or rdtype in (dns.rdatatype.AXFR, dns.rdatatype.IXFR):
        resp.flags &= ~dns.flags.AA
        resp.set_rcode(dns.rcode.REFUSED)
    else:
        addrs = zone.lookup(name)
        if addrs is None:
            resp.set_rcode(dns.rcode.NXDOMAIN)
        else:
            wanted: list[dns.rdatatype.RdataType] = []
            if rdtype in (dns.rdatatype.A, dns.rdatatype.ANY):
                wanted.append(dns.rdatatype.A)
            if rdtype in (dns.rdatatype.AAAA, dns.rdatatype.ANY):
                wanted.append(dns.rdatatype.AAAA)
            for t in wanted:
                version = 4 if t == dns.rdatatype.A else 6
                matching = [a for a in addrs if ipaddress.ip_address(a).version == version]
                if matching:
                    resp.answer.append(
                        dns.rrset.from_text_list(name, TTL, dns.rdataclass.IN, t, matching)
                    )
            # A name with no records of the asked type is NOERROR with no data.
    if tcp:
        max_size = 65535
    else:
        max_size = max(512, min(query.payload, 4096)) if query.edns >= 0 else 512
    try:
        out = resp.to_wire(max_size=max_size)
    except dns.exception.TooBig:
        resp.answer.clear()
        resp.flags |= dns.flags.TC
        out = resp.to_wire(max_size=max_size)
    return Reply(
        out,
        name.to_text(omit_final_dot=True),
        dns.rdatatype.to_text(rdtype),
        dns.rcode.to_text(resp.rcode()),
    )


def delegated_zone(wire: bytes, delegations: Mapping[dns.name.Name, Any]) -> dns.name.Name | None:
    """The delegated zone a query's question falls in, or None. Never raises."""
    if not delegations or len(wire) < HEADER_LEN or wire[2] & 0x80:
        return None
    try:
        q = dns.message.from_wire(wire).question
    except Exception:
        return None
    if len(q) != 1:
        return None
    name = q[0].name
    return next((z for z in delegations if name.is_subdomain(z)), None)


class Forwarder(asyncio.DatagramProtocol):
    """Relays queries for one delegated zone to its server and the answers back.

    Each relayed query gets an ID of our own (the clients' IDs may collide); at most
    ``max_pending`` wait at once, each for ``timeout_s``, after which the client gets
    SERVFAIL. Answers to IDs we did not send are dropped.
    """

    def __init__(self, target: tuple[str, int], timeout_s: float = 2.0,
                 max_pending: int = 4096) -> None:
        self.target, self.timeout_s, self.max_pending = target, timeout_s, max_pending
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: dict[int, tuple[bytes, Any, asyncio.DatagramTransport, Any]] = {}
        self.next_id = 1
        self.relayed = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A datagram endpoint's protocol is always handed a datagram transport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def relay(self, wire: bytes, client: Any, reply_via: asyncio.DatagramTransport) -> None:
        if self.transport is None or len(self.pending) >= self.max_pending:
            self._fail(wire, client, reply_via)
            return
        qid = self.next_id
        while qid in self.pending:
            qid = qid % 0xFFFF + 1
        self.next_id = qid % 0xFFFF + 1
        timer = asyncio.get_running_loop().call_later(self.timeout_s, self._expire, qid)
        self.pending[qid] = (wire[:HEADER_LEN], client, reply_via, timer)
        self.transport.sendto(struct.pack("!H", qid) + wire[2:], self.target)
        self.relayed += 1

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if len(data) < HEADER_LEN or not data[2] & 0x80:
            return
        entry = self.pending.pop(struct.unpack("!H", data[:2])[0], None)
        if entry is None:
            return
        header, client, reply_via, timer = entry
        timer.cancel()
        reply_via.sendto(header[:2] + data[2:], client)

    def _expire(self, qid: int) -> None:
        entry = self.pending.pop(qid, None)
        if entry is not None:
            header, client, reply_via, _ = entry
            self._fail(header, client, reply_via)

    @staticmethod
    def _fail(wire: bytes, client: Any, reply_via: asyncio.DatagramTransport) -> None:
        reply = _header_only(wire, dns.rcode.SERVFAIL)
        if reply is not None:
            reply_via.sendto(reply.wire, client)

    def error_received(self, exc: Exception) -> None:  # an ICMP error: the timer answers
        pass


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A datagram endpoint's protocol is always handed a datagram transport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        zone = delegated_zone(data, self.server.forwarders)
        if zone is not None and self.transport is not None:
            self.server.forwarders[zone].relay(data, addr, self.transport)
            return
        reply = handle_query(data, self.server.zone, tcp=False)
        if reply is None or self.transport is None:
            return
        self.transport.sendto(reply.wire, addr)
        self.server.note(reply, "udp", addr)

    def error_received(self, exc: Exception) -> None:  # ICMP errors: nothing to do
        pass


class DnsServer:
    """The resolver's sockets; start() binds UDP and TCP on each listen address."""

    def __init__(self, zone: Zone, events: EventLog | None = None,
                 delegations: Mapping[str, tuple[str, int]] | None = None) -> None:
        self.zone = zone
        self.events = events
        self.bound: list[tuple[str, int]] = []
        self.listeners = Listeners()
        self.delegations = {dns.name.from_text(z): t for z, t in (delegations or {}).items()}
        self.forwarders: dict[dns.name.Name, Forwarder] = {}

    def note(self, reply: Reply, transport: str, peer: Any) -> None:
        if self.events is not None:
            self.events.emit("query", name=reply.name, type=reply.type, rcode=reply.rcode,
                             transport=transport, peer=str(peer[0]) if peer else None)

    async def start(self, listens: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        loop = asyncio.get_running_loop()
        try:
            for zone, target in self.delegations.items():
                family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
                tr, fwd = await loop.create_datagram_endpoint(
                    functools.partial(Forwarder, target), family=family)
                self.listeners.udp.append(tr)
                self.forwarders[zone] = fwd
            for host, port in listens:
                udp, tcp = bind_udp_tcp_pair(host, port)
                tr, _ = await loop.create_datagram_endpoint(lambda: _UdpProtocol(self), sock=udp)
                self.listeners.udp.append(tr)
                self.listeners.tcp.append(await asyncio.start_server(self._tcp_conn, sock=tcp))
                self.bound.append((host, udp.getsockname()[1]))
        except BaseException:
            await self.close()
            raise
        return self.bound

    async def _tcp_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        async with self.listeners.connection(writer):
            try:
                while True:
                    hdr = await asyncio.wait_for(reader.readexactly(2), TCP_IDLE_TIMEOUT)
                    (length,) = struct.unpack("!H", hdr)
                    data = await asyncio.wait_for(reader.readexactly(length), TCP_IDLE_TIMEOUT)
                    reply = (_header_only(data, dns.rcode.REFUSED)
                             if delegated_zone(data, self.forwarders)
                             else handle_query(data, self.zone, tcp=True))
                    if reply is None:
                        break  # garbage on a stream: drop the connection
                    writer.write(struct.pack("!H", len(reply.wire)) + reply.wire)
                    await writer.drain()
                    self.note(reply, "tcp", peer)
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError, OSError):
                pass

    async def close(self) -> None:
        await self.listeners.close()


def load_zone(zone_args: Iterable[str], zone_files: Iterable[str]) -> Zone:
    """The zone map from ``--zone-file`` JSON files and ``--zone NAME=ADDR[,ADDR]`` flags."""
    zone = Zone()
    for path in zone_files:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"zone file {path}: {exc}") from None
        names = doc.get("names") if isinstance(doc, dict) else None
        if not isinstance(names, dict):
            raise ConfigError(f'zone file {path}: expected {{"names": {{NAME: [ADDR, ...]}}}}')
        other = Zone.from_mapping(names)
        for k, v in other.exact.items():
            zone.add(k.to_text(), v)
        for k, v in other.wildcards.items():
            zone.add("*." + k.to_text(), v)
    for item in zone_args:
        name, sep, addrs = item.partition("=")
        if not sep or not name or not addrs:
            raise ConfigError(f"bad --zone {item!r}: expected NAME=ADDR[,ADDR...]")
        zone.add(name, addrs.split(","))
    return zone


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ptlab.services.dns", description=__doc__.split("\n")[0])
    p.add_argument("--listen", action="append", default=[], metavar="HOST:PORT",
                   help="UDP+TCP listen address, repeatable (default 0.0.0.0:53 and [::]:53)")
    p.add_argument("--zone", action="append", default=[], metavar="NAME=ADDR[,ADDR]",
                   help="a name and its addresses; *.suffix is a wildcard; repeatable")
    p.add_argument("--zone-file", action="append", default=[], metavar="FILE",
                   help='JSON {"names": {NAME: [ADDR, ...]}}; repeatable')
    p.add_argument("--delegate", action="append", default=[], metavar="ZONE=HOST:PORT",
                   help="forward queries under ZONE to that server over UDP; repeatable")
    return p


def parse_delegations(items: Iterable[str]) -> dict[str, tuple[str, int]]:
    """``ZONE=HOST:PORT`` flags as a map; ConfigError names a bad one."""
    out: dict[str, tuple[str, int]] = {}
    for item in items:
        zone, sep, target = item.partition("=")
        if not sep or not zone or not target:
            raise ConfigError(f"bad --delegate {item!r}: expected ZONE=HOST:PORT")
        try:
            dns.name.from_text(zone)
            host, port = parse_hostport(target, 53)
            ipaddress.ip_address(host)
        except (dns.exception.DNSException, ValueError) as exc:
            raise ConfigError(f"bad --delegate {item!r}: {exc}") from None
        out[zone] = (host, port)
    return out


async def serve(args: argparse.Namespace, events: EventLog, stop: asyncio.Event) -> None:
    zone = load_zone(args.zone, args.zone_file)
    listens = [parse_hostport(x, 53) for x in (args.listen or DEFAULT_LISTEN)]
    server = DnsServer(zone, events, parse_delegations(args.delegate))
    bound = await server.start(listens)
    events.emit("ready", listen=[format_hostport(h, p) for h, p in bound],
                names=len(zone.exact) + len(zone.wildcards))
    try:
        await stop.wait()
    finally:
        await server.close()


def main(argv: list[str] | None = None) -> int:
    return run_service(COMPONENT, build_parser(), serve, argv)


if __name__ == "__main__":
    raise SystemExit(main())

