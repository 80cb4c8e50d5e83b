"""A bounded upstream: behind a reader that does not read, the process holds no
more of a flat-out sender than read_bound(), and the sender is held back."""

from __future__ import annotations

import asyncio
import socket

import pytest

from transports.common.upstream import READ_BUFFER, open_bounded, read_bound


async def flood_server() -> tuple[asyncio.Server, int, list[int]]:
    sent = [0]

    async def handle(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                writer.write(bytes(65536))
                await writer.drain()
                sent[0] += 65536
        except (ConnectionError, asyncio.CancelledError):
            writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], sent


@pytest.mark.parametrize("bounded", [True, False])
async def test_what_a_stalled_reader_holds_stays_under_the_bound(bounded):
    server, port, _ = await flood_server()
    try:
        if bounded:
            reader, writer = await open_bounded("127.0.0.1", port)
        else:  # what asyncio gives by default: the comparison that makes the bound matter
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        held = 0
        for _ in range(5):  # a relay that reads once in a while, behind a slow client
            await asyncio.sleep(0.1)
            held = max(held, len(await reader.read(1 << 20)))
        if bounded:
            assert 0 < held <= read_bound()
        else:
            assert held > read_bound()
        writer.close()
    finally:
        server.close()


async def test_the_receive_buffer_is_set_before_the_connection():
    server, port, _ = await flood_server()
    try:
        _, writer = await open_bounded("localhost", port)  # a name resolves as well
        sock = writer.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) <= 2 * READ_BUFFER
        writer.close()
    finally:
        server.close()


async def test_a_refused_connection_is_an_os_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    with pytest.raises(OSError):
        await open_bounded("127.0.0.1", port)
