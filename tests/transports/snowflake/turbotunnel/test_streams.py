"""An smux stream as asyncio streams: the bridge's one-write-at-a-time queue and
its meter, and a failed session seen as a reset connection (which relay() ends
on quietly, where an SmuxError escaped it as a traceback: issue 48)."""

from __future__ import annotations

import asyncio

import pytest

from tests.transports.snowflake.turbotunnel.test_smux import sessions
from transports.common.relay import relay
from transports.snowflake.turbotunnel.clientbuffer import Meter
from transports.snowflake.turbotunnel.streams import as_streams


async def test_with_high_water_zero_a_writer_waits_for_each_write_and_the_meter_counts_it():
    client, server, _, _ = sessions()
    try:
        opened = await client.open_stream()
        theirs = await server.accept_stream()
        meter = Meter()
        reader, writer = as_streams(opened, high_water=0, meter=meter)
        writer.write(b"a" * 1000)
        assert meter.bytes == 1000  # queued until smux has taken it
        assert writer.transport.get_write_buffer_size() == 1000
        await asyncio.wait_for(writer.drain(), 5)  # waits until the queue is empty
        assert meter.bytes == 0
        assert await asyncio.wait_for(theirs.readexactly(1000), 5) == b"a" * 1000
        writer.write(b"b" * 10)
        writer.transport.abort()
        assert meter.bytes == 0  # an aborted queue holds nothing
    finally:
        await client.close()
        await server.close()


async def test_a_write_that_fails_reaches_the_reader_as_a_reset_connection():
    client, server, _, _ = sessions()
    opened = await client.open_stream()
    await server.accept_stream()  # and never read: the peer's window fills
    reader, writer = as_streams(opened)
    writer.write(bytes(300_000))  # more than the 256 KiB window: the writer waits
    await asyncio.sleep(0.05)
    await client.close()  # the session fails under the waiting write
    await asyncio.sleep(0.05)
    with pytest.raises(ConnectionResetError, match="smux: write on a closed stream"):
        await asyncio.wait_for(reader.read(100), 5)
    await server.close()


async def test_relay_ends_quietly_when_the_session_fails_under_it():
    client, server, _, _ = sessions()
    opened = await client.open_stream()
    await server.accept_stream()  # never read

    async def flood(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                w.write(bytes(65536))
                await w.drain()
        except ConnectionError:
            w.close()
    upstream_server = await asyncio.start_server(flood, "127.0.0.1", 0)
    upstream = await asyncio.open_connection(
        "127.0.0.1", upstream_server.sockets[0].getsockname()[1])
    relaying = asyncio.create_task(relay(as_streams(opened), upstream))
    await asyncio.sleep(0.2)  # the peer's window is full: a write waits
    await client.close()
    up, down = await asyncio.wait_for(relaying, 5)  # returns; raises nothing
    assert up == 0 and down >= 262144
    upstream_server.close()
    await server.close()
