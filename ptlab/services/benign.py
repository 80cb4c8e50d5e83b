"""Benign servers for the collateral-damage mix, in one process.

A censor that blocks "whatever it cannot classify" (fully encrypted traffic,
unknown UDP) also blocks ordinary protocols. These servers give the benign
workload such protocols to measure that damage with:

- a binary TCP protocol whose frames start with non-printable bytes
  (``00 01``, a 2-byte length, a payload); the server answers each frame with
  the SHA-256 of its payload, so a client can check the bytes got through intact;
- a UDP echo, standing in for QUIC and other UDP protocols.

Run: ``python -m ptlab.services.benign --binary-listen 198.18.7.2:7000
--udp-listen 198.18.7.2:7001``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import socket
import struct
from collections.abc import Iterable
from typing import cast

from ptcommon.events import EventLog
from ptlab.services.listeners import Listeners
from ptlab.services.main import ConfigError, run_service
from ptlab.services.netutil import bind_socket, format_hostport, parse_hostport

COMPONENT = "benign"
BINARY_MAGIC = b"\x00\x01"
BINARY_IDLE_TIMEOUT = 30.0


def binary_frame(payload: bytes) -> bytes:
    """One request frame of the binary protocol."""
    if len(payload) > 0xFFFF:
        raise ValueError("payload longer than 65535 bytes")
    return BINARY_MAGIC + struct.pack("!H", len(payload)) + payload


def binary_reply(payload: bytes) -> bytes:
    """What the server answers to a frame carrying `payload`."""
    return hashlib.sha256(payload).digest()


class _UdpEcho(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A datagram endpoint's protocol is always handed a datagram transport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.transport is not None:
            self.transport.sendto(data, addr)

    def error_received(self, exc: Exception) -> None:
        pass


class BenignServers:
    """The binary TCP servers and UDP echoes of one process."""

    def __init__(self, events: EventLog | None = None) -> None:
        self.events = events
        self.binary_bound: list[tuple[str, int]] = []
        self.udp_bound: list[tuple[str, int]] = []
        self.listeners = Listeners()

    async def start(self, binary: Iterable[tuple[str, int]] = (),
                    udp: Iterable[tuple[str, int]] = ()) -> None:
        loop = asyncio.get_running_loop()
        try:
            for host, port in binary:
                sock = bind_socket(host, port, socket.SOCK_STREAM)
                self.listeners.tcp.append(
                    await asyncio.start_server(self._binary_conn, sock=sock))
                self.binary_bound.append((host, sock.getsockname()[1]))
            for host, port in udp:
                sock = bind_socket(host, port, socket.SOCK_DGRAM)
                tr, _ = await loop.create_datagram_endpoint(_UdpEcho, sock=sock)
                self.listeners.udp.append(tr)
                self.udp_bound.append((host, sock.getsockname()[1]))
        except BaseException:
            await self.close()
            raise

    async def _binary_conn(self, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        frames = 0
        async with self.listeners.connection(writer):
            try:
                while True:
                    try:
                        head = await asyncio.wait_for(reader.readexactly(4),
                                                      BINARY_IDLE_TIMEOUT)
                    except asyncio.IncompleteReadError:
                        break
                    if head[:2] != BINARY_MAGIC:
                        break  # not our protocol: hang up
                    (length,) = struct.unpack("!H", head[2:])
                    payload = await asyncio.wait_for(reader.readexactly(length),
                                                     BINARY_IDLE_TIMEOUT)
                    writer.write(binary_reply(payload))
                    await writer.drain()
                    frames += 1
            except (asyncio.IncompleteReadError, TimeoutError, OSError):
                pass
        if self.events is not None and peer:
            self.events.emit("binary", peer=format_hostport(str(peer[0]), peer[1]),
                             frames=frames)

    async def close(self) -> None:
        await self.listeners.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ptlab.services.benign", description=__doc__.split("\n")[0])
    p.add_argument("--binary-listen", action="append", default=[], metavar="HOST:PORT",
                   help="binary TCP protocol listen address, repeatable")
    p.add_argument("--udp-listen", action="append", default=[], metavar="HOST:PORT",
                   help="UDP echo listen address, repeatable")
    return p


async def serve(args: argparse.Namespace, events: EventLog, stop: asyncio.Event) -> None:
    if not args.binary_listen and not args.udp_listen:
        raise ConfigError("nothing to serve: give --binary-listen and/or --udp-listen")
    servers = BenignServers(events)
    await servers.start([parse_hostport(x) for x in args.binary_listen],
                        [parse_hostport(x) for x in args.udp_listen])
    events.emit("ready",
                binary=[format_hostport(h, p) for h, p in servers.binary_bound],
                udp=[format_hostport(h, p) for h, p in servers.udp_bound])
    try:
        await stop.wait()
    finally:
        await servers.close()


def main(argv: list[str] | None = None) -> int:
    return run_service(COMPONENT, build_parser(), serve, argv)


if __name__ == "__main__":
    raise SystemExit(main())
