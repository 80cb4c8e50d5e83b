"""A small STUN server (RFC 5389 Binding) for the lab.

WebRTC peers (Snowflake clients and proxies) must learn their reflexive
address from a STUN server inside the lab, never a public one
(docs/architecture.md §4.3). This answers Binding Requests with XOR-MAPPED-ADDRESS
and MAPPED-ADDRESS (for old clients), echoing the transaction id, and drops
every datagram that is not a well-formed STUN Binding Request.

Run: ``python -m ptlab.services.stun --listen 198.18.9.2:3478 --listen [2001:db8:0:9::2]:3478``.
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import ipaddress
import socket
import struct
from collections.abc import Iterable
from typing import cast

from ptcommon.events import EventLog
from ptlab.services.main import run_service
from ptlab.services.netutil import bind_socket, format_hostport, parse_hostport, unmap_v4

COMPONENT = "stun"
DEFAULT_PORT = 3478
DEFAULT_LISTEN = ("0.0.0.0:3478", "[::]:3478")
SOFTWARE = b"ptlab-stun"

MAGIC_COOKIE = 0x2112A442
HEADER = struct.Struct("!HHI12s")
BINDING_REQUEST = 0x0001
BINDING_SUCCESS = 0x0101
ATTR_MAPPED_ADDRESS = 0x0001
ATTR_XOR_MAPPED_ADDRESS = 0x0020
ATTR_SOFTWARE = 0x8022
ATTR_FINGERPRINT = 0x8028
FINGERPRINT_XOR = 0x5354554E


def _pad(value: bytes) -> bytes:
    return value + b"\x00" * (-len(value) % 4)


def _attr(kind: int, value: bytes) -> bytes:
    return struct.pack("!HH", kind, len(value)) + _pad(value)


def _fingerprint(data: bytes) -> int:
    return (binascii.crc32(data) & 0xFFFFFFFF) ^ FINGERPRINT_XOR


def parse_binding_request(data: bytes) -> bytes | None:
    """The transaction id of a well-formed Binding Request, else None."""
    if len(data) < HEADER.size:
        return None
    mtype, length, cookie, tid = HEADER.unpack_from(data)
    if mtype != BINDING_REQUEST or cookie != MAGIC_COOKIE:
        return None  # also rejects anything with the top two bits set
    if length % 4 or length != len(data) - HEADER.size:
        return None
    pos = HEADER.size
    while pos < len(data):
        if pos + 4 > len(data):
            return None
        kind, alen = struct.unpack_from("!HH", data, pos)
        end = pos + 4 + alen
        if end > len(data):
            return None
        if kind == ATTR_FINGERPRINT:
            # FINGERPRINT must be last and right, or the message is not STUN.
            if alen != 4 or end != len(data):
                return None
            (got,) = struct.unpack_from("!I", data, pos + 4)
            if got != _fingerprint(data[:pos]):
                return None
        pos = end + (-alen % 4)
    if pos != len(data):
        return None
    return tid


def _address_value(host: str, port: int, tid: bytes, xor: bool) -> bytes:
    ip = ipaddress.ip_address(host)
    packed = ip.packed
    if xor:
        port ^= MAGIC_COOKIE >> 16
        mask = struct.pack("!I", MAGIC_COOKIE) + (tid if ip.version == 6 else b"")
        packed = bytes(a ^ b for a, b in zip(packed, mask, strict=True))
    family = 0x01 if ip.version == 4 else 0x02
    return struct.pack("!BBH", 0, family, port) + packed


def binding_response(tid: bytes, host: str, port: int) -> bytes:
    """A Binding Success Response telling (host, port) its reflexive address."""
    host = unmap_v4(host.split("%")[0])
    body = (
        _attr(ATTR_XOR_MAPPED_ADDRESS, _address_value(host, port, tid, xor=True))
        + _attr(ATTR_MAPPED_ADDRESS, _address_value(host, port, tid, xor=False))
        + _attr(ATTR_SOFTWARE, SOFTWARE)
    )
    # The length covers FINGERPRINT (8 bytes) before the CRC is computed.
    head = HEADER.pack(BINDING_SUCCESS, len(body) + 8, MAGIC_COOKIE, tid)
    crc = _fingerprint(head + body)
    return head + body + _attr(ATTR_FINGERPRINT, struct.pack("!I", crc))


def handle_datagram(data: bytes, peer: tuple[str, int]) -> bytes | None:
    """The reply to one datagram, or None to ignore it. Never raises."""
    try:
        tid = parse_binding_request(data)
        if tid is None:
            return None
        return binding_response(tid, peer[0], peer[1])
    except Exception:
        return None


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, events: EventLog | None) -> None:
        self.events = events
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A datagram endpoint's protocol is always handed a datagram transport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = handle_datagram(data, addr)
        if reply is None or self.transport is None:
            return
        self.transport.sendto(reply, addr)
        if self.events is not None:
            self.events.emit("binding", peer=format_hostport(unmap_v4(addr[0]), addr[1]))

    def error_received(self, exc: Exception) -> None:
        pass


class StunServer:
    """UDP listeners answering Binding Requests."""

    def __init__(self, events: EventLog | None = None) -> None:
        self.events = events
        self.bound: list[tuple[str, int]] = []
        self._transports: list[asyncio.BaseTransport] = []

    async def start(self, listens: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        loop = asyncio.get_running_loop()
        try:
            for host, port in listens:
                sock = bind_socket(host, port, socket.SOCK_DGRAM)
                tr, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self.events),
                                                            sock=sock)
                self._transports.append(tr)
                self.bound.append((host, sock.getsockname()[1]))
        except BaseException:
            self.close()
            raise
        return self.bound

    def close(self) -> None:
        for tr in self._transports:
            tr.close()
        self._transports.clear()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ptlab.services.stun", description=__doc__.split("\n")[0])
    p.add_argument("--listen", action="append", default=[], metavar="HOST:PORT",
                   help="UDP listen address, repeatable (default 0.0.0.0:3478 and [::]:3478)")
    return p


async def serve(args: argparse.Namespace, events: EventLog, stop: asyncio.Event) -> None:
    listens = [parse_hostport(x, DEFAULT_PORT) for x in (args.listen or DEFAULT_LISTEN)]
    server = StunServer(events)
    bound = await server.start(listens)
    events.emit("ready", listen=[format_hostport(h, p) for h, p in bound])
    try:
        await stop.wait()
    finally:
        server.close()


def main(argv: list[str] | None = None) -> int:
    return run_service(COMPONENT, build_parser(), serve, argv)


if __name__ == "__main__":
    raise SystemExit(main())
