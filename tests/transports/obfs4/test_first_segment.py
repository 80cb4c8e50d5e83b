"""The obfs4 client's ``first-segment=N`` argument: the hello's first N bytes in a
TCP segment of their own, the byte stream unchanged (transports/obfs4/transport.py).

How the split is observed. Reading on the server side cannot show it reliably:
the second segment may be queued before the reader wakes up, and one recv()
then returns both. So the server's kernel counts for us: ``tcpi_data_segs_in``
(TCP_INFO, Linux 4.6+) is the number of data segments the accepted socket
received. On loopback the MSS is ~64 KiB, so an unsplit hello (<= 8192 bytes) is
exactly one segment and a split one exactly two. As root we also sniff ``lo``
with a packet socket and check the first client payload is N bytes long, which
is what a first-packet censor sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from tests.support.echo import echo
from transports.base import TransportError
from transports.common.elligator2 import Keypair, public_key_from_private
from transports.obfs4.handshake import ServerKey
from transports.obfs4.statefile import ServerState, encode_cert
from transports.obfs4.transport import (
    MAX_FIRST_SEGMENT,
    TRANSPORT,
    Obfs4ClientFactory,
    Obfs4ServerFactory,
    ServerPolicy,
    parse_first_segment,
    send_split,
)

TCPI_DATA_SEGS_IN = 152  # offset of tcpi_data_segs_in in struct tcp_info


def data_segs_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    if len(info) < TCPI_DATA_SEGS_IN + 4:
        pytest.skip("the kernel's tcp_info has no tcpi_data_segs_in (Linux < 4.6)")
    return struct.unpack_from("I", info, TCPI_DATA_SEGS_IN)[0]


def make_key() -> ServerKey:
    state = ServerState.generate()
    return ServerKey(state.node_id, Keypair(state.identity_private,
                                            public_key_from_private(state.identity_private)))


def client_args(key: ServerKey, **extra: str) -> dict[str, str]:
    return {"cert": encode_cert(key.node_id, key.identity.public), "iat-mode": "0", **extra}


# -- arguments --------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "words"), [
    ("forty", "not an integer"), ("4.5", "not an integer"), ("", "not an integer"),
    ("-1", "out of range"), (str(MAX_FIRST_SEGMENT + 1), "out of range"),
    ("100000", "out of range"),
])
def test_bad_first_segment_is_a_value_error_naming_the_arg(value: str, words: str) -> None:
    with pytest.raises(ValueError, match="first-segment") as info:
        parse_first_segment(value)
    assert words in str(info.value)
    # Through the transport, like the other client argument errors.
    with pytest.raises(TransportError, match="obfs4 client arguments: first-segment"):
        TRANSPORT.client_factory(None, client_args(make_key(), **{"first-segment": value}))


def test_first_segment_parses_and_defaults_to_off() -> None:
    key = make_key()
    assert TRANSPORT.client_factory(None, client_args(key)).first_segment == 0
    for value, n in (("0", 0), ("1", 1), ("40", 40), (str(MAX_FIRST_SEGMENT), 1448)):
        assert parse_first_segment(value) == n
        factory = TRANSPORT.client_factory(None, client_args(key, **{"first-segment": value}))
        assert isinstance(factory, Obfs4ClientFactory) and factory.first_segment == n


# -- on loopback ------------------------------------------------------------------------

class Bridge:
    """Our obfs4 server on loopback, echoing; keeps each accepted socket for TCP_INFO."""

    def __init__(self) -> None:
        self.key = make_key()
        self.factory = Obfs4ServerFactory([self.key], os.urandom(24), 0,
                                          ServerPolicy(handshake_timeout_s=2.0))
        self.socks: list[socket.socket] = []
        self.errors: list[BaseException] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.socks.append(writer.get_extra_info("socket"))
        try:
            await echo(*await self.factory.wrap(reader, writer))
        except (TransportError, ConnectionError) as exc:
            self.errors.append(exc)
            writer.close()


@contextlib.asynccontextmanager
async def bridge() -> AsyncIterator[Bridge]:
    b = Bridge()
    server = await asyncio.start_server(b.handle, "127.0.0.1", 0)
    b.port = server.sockets[0].getsockname()[1]
    try:
        yield b
    finally:
        server.close()


async def round_trip(b: Bridge, first_segment: int, payload: bytes) -> int:
    """Dial with ``first-segment``, echo ``payload``; the server's count of the
    data segments that carried the client hello."""
    args = client_args(b.key, **{"first-segment": str(first_segment)})
    reader, writer = await asyncio.wait_for(
        TRANSPORT.client_factory(None, args).dial("127.0.0.1", b.port), 3)
    try:
        # The server answered, so the whole hello is in; nothing else was sent yet.
        hello_segments = data_segs_in(b.socks[-1])
        writer.write(payload)
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(len(payload)), 3) == payload
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return hello_segments


@pytest.mark.parametrize(("first_segment", "segments"), [(0, 1), (40, 2), (1, 2)])
async def test_round_trip_is_byte_exact_and_the_hello_is_split(first_segment: int,
                                                              segments: int) -> None:
    payload = random.Random(first_segment).randbytes(50_000)
    async with bridge() as b:
        assert await round_trip(b, first_segment, payload) == segments
        assert not b.errors


@pytest.mark.parametrize(("first", "segments"), [(0, 1), (40, 2), (299, 2), (300, 1),
                                                 (1448, 1)])
async def test_send_split_segments(first: int, segments: int) -> None:
    """``first`` >= len(data) (or 0) is one plain write; otherwise exactly two segments."""
    data = os.urandom(300)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        loop = asyncio.get_running_loop()
        connect = asyncio.open_connection(*listener.getsockname())
        (reader, writer), (peer, _) = await asyncio.gather(connect, loop.sock_accept(listener))
        with peer:
            await send_split(writer, data, first)
            got = b""
            while len(got) < len(data):
                got += await asyncio.wait_for(loop.sock_recv(peer, 4096), 2)
            assert got == data
            assert data_segs_in(peer) == segments
            writer.close()


# -- what a first-packet censor sees ----------------------------------------------------

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # root may exceed rmem_max


def client_payloads(sniffer: socket.socket, port: int) -> list[int]:
    """Payload sizes of the TCP segments to ``port`` seen on lo, in order."""
    sizes = []
    while True:
        try:
            frame, addr = sniffer.recvfrom(65536)
        except BlockingIOError:
            return sizes
        if addr[2] == PACKET_OUTGOING:  # lo shows each packet going out and coming in
            continue
        ip = frame[14:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != socket.IPPROTO_TCP:
            continue
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack_from("!H", ip, 2)[0]
        tcp = ip[ihl:]
        if struct.unpack_from("!H", tcp, 2)[0] != port:
            continue
        payload = total - ihl - (tcp[12] >> 4) * 4
        if payload > 0:
            sizes.append(payload)


@pytest.mark.skipif(os.geteuid() != 0, reason="sniffing lo needs root (CAP_NET_RAW)")
@pytest.mark.lab
async def test_the_first_client_packet_is_exactly_n_bytes() -> None:
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)) as sniffer:
        # lo carries every loopback test on the machine: a default-sized buffer
        # (208 KiB) filled with others' packets under load and lost ours.
        sniffer.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
        sniffer.bind(("lo", 0))
        sniffer.setblocking(False)
        async with bridge() as b:
            assert await round_trip(b, 40, b"hello" * 100) == 2
            await asyncio.sleep(0.05)
            sizes = client_payloads(sniffer, b.port)
    # The hello (141..8192 bytes) as 40 + the rest, then the data frame(s).
    assert sizes[0] == 40
    assert sizes[1] >= 141 - 40
