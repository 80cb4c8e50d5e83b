"""Listeners: close() ends handlers that sit on idle reads, quietly and at once."""

from __future__ import annotations

import asyncio

from ptlab.services.listeners import Listeners


async def test_close_ends_an_idle_handler_and_the_peer_sees_eof() -> None:
    listeners = Listeners()
    ended: list[str] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with listeners.connection(writer):
            await reader.read()  # idle until cancelled
        ended.append("after the body")  # the cancellation was turned into an end

    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    listeners.tcp.append(server)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(100):
        if listeners.open_connections:
            break
        await asyncio.sleep(0.01)
    assert listeners.open_connections == 1
    await asyncio.wait_for(listeners.close(), 2)
    assert await asyncio.wait_for(reader.read(), 2) == b""
    assert ended == ["after the body"] and listeners.open_connections == 0
    assert listeners.tcp == [] and not server.is_serving()
    writer.close()
    await asyncio.sleep(0.05)
    assert errors == []


async def test_a_handler_that_ends_by_itself_is_forgotten() -> None:
    listeners = Listeners()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with listeners.connection(writer):
            writer.write(await reader.readexactly(3))

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    listeners.tcp.append(server)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    writer.write(b"abc")
    assert await asyncio.wait_for(reader.read(), 2) == b"abc"  # echoed, then closed
    assert listeners.open_connections == 0
    writer.close()
    await listeners.close()
