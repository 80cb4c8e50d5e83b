"""The station's registrar and application on loopback (the datapath's DNAT is
replaced by telling the application which phantom a connection was for)."""

from __future__ import annotations

import asyncio
import random

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from tests.support.echo import start_echo_server
from transports.base import TransportError
from transports.common.elligator2 import new_keypair
from transports.conjure.phantom import (
    PhantomConfig,
    SubnetGroup,
    derive_keys,
    obfs4_identity,
    select_phantom,
)
from transports.conjure.registration import Registry, build_registration, new_secret
from transports.conjure.station import Station, covert_blocklist
from transports.conjure.wrapping import min_tag, prefix_hello
from transports.obfs4.transport import Obfs4ClientFactory

CONFIG = PhantomConfig([SubnetGroup.parse(1, ["198.19.200.128/25"])])


STATION_KEY = new_keypair()


async def station_with(phantom_of, live=False, deadline=(0.3, 0.4), trusted=("127.0.0.1",)):
    async def liveness(_addr, _port):
        return live

    async def dial(address):
        host, _, port = address.rpartition(":")
        return await asyncio.open_connection(host, int(port))

    # Conjure's blocklist, except loopback, where the tests' covert server listens.
    blocked = covert_blocklist({"198.19.0.1"})
    registry = Registry(CONFIG, 1, lambda h: h != "127.0.0.1" and blocked(h))
    station = Station(registry, None, dial, trusted, rng=random.Random(1), deadline_s=deadline,
                      liveness=liveness, destination=lambda _w: phantom_of(),
                      private_key=STATION_KEY.private)
    app_server = await asyncio.start_server(station.handle, "127.0.0.1", 0)
    registrar = TestServer(station.registrar_app(), host="127.0.0.1")
    await registrar.start_server()
    return station, app_server, registrar


async def post(registrar, body, xff=None):
    headers = {"X-Forwarded-For": xff} if xff else {}
    async with aiohttp.ClientSession() as http, \
            http.post(registrar.make_url("/api/register"), data=body, headers=headers) as r:
        return r.status, await r.text()


async def test_a_registered_min_connection_reaches_the_covert_destination():
    echo, echo_port = await start_echo_server()
    secret = new_secret()
    phantom = str(select_phantom(derive_keys(secret).seed, CONFIG, False).address)
    station, app, registrar = await station_with(lambda: (phantom, 443))
    try:
        status, _ = await post(registrar, build_registration(secret, "min",
                                                             f"127.0.0.1:{echo_port}", 1))
        assert status == 204 and station.stats.registrations == 1
        reader, writer = await asyncio.open_connection(*app.sockets[0].getsockname()[:2])
        writer.write(min_tag(secret) + b"hello, covert")
        assert await asyncio.wait_for(reader.readexactly(13), 5) == b"hello, covert"
        writer.write(b"x" * 100_000)
        assert len(await asyncio.wait_for(reader.readexactly(100_000), 5)) == 100_000
        writer.close()
        assert station.stats.matched == 1
        (reg,) = list(station.registry)
        assert reg.first_use is not None
    finally:
        await registrar.close()
        app.close()
        echo.close()


async def test_a_prefix_connection_reaches_the_covert_destination():
    echo, echo_port = await start_echo_server()
    secret = new_secret()
    phantom = str(select_phantom(derive_keys(secret).seed, CONFIG, False).address)
    station, app, registrar = await station_with(lambda: (phantom, 443))
    try:
        status, _ = await post(registrar, build_registration(
            secret, "prefix", f"127.0.0.1:{echo_port}", 1, prefix_id=9))
        assert status == 204
        (reg,) = list(station.registry)
        assert reg.port == 443  # the group allows no other: not OpenSSH2's 22
        reader, writer = await asyncio.open_connection(*app.sockets[0].getsockname()[:2])
        writer.write(prefix_hello(secret, STATION_KEY.public, 9) + b"over ssh-ish")
        assert await asyncio.wait_for(reader.readexactly(12), 5) == b"over ssh-ish"
        writer.close()
    finally:
        await registrar.close()
        app.close()
        echo.close()


async def test_an_obfs4_connection_with_the_registrations_own_identity():
    """The station finds the client's obfs4 mark under the registration's derived key,
    then obfs4's server completes the handshake and the stream reaches the covert host."""
    echo, echo_port = await start_echo_server()
    secret = new_secret()
    keys = derive_keys(secret)
    phantom = str(select_phantom(keys.seed, CONFIG, False).address)
    station, app, registrar = await station_with(lambda: (phantom, 443))
    try:
        status, _ = await post(registrar, build_registration(
            secret, "obfs4", f"127.0.0.1:{echo_port}", 1))
        assert status == 204
        _, public, node_id = obfs4_identity(keys)
        (reg,) = list(station.registry)
        assert reg.obfs4_key.node_id == node_id and reg.obfs4_key.identity.public == public
        host, port = app.sockets[0].getsockname()[:2]
        reader, writer = await Obfs4ClientFactory(node_id, public, 0, 5).dial(host, port)
        writer.write(b"inside obfs4" * 1000)
        assert await asyncio.wait_for(reader.readexactly(12000), 5) == b"inside obfs4" * 1000
        writer.close()
        assert station.stats.matched == 1
        # Another registration's identity is not accepted on this phantom.
        other = obfs4_identity(derive_keys(new_secret()))
        with pytest.raises(TransportError):
            await Obfs4ClientFactory(other[2], other[1], 0, 1).dial(host, port)
    finally:
        await registrar.close()
        app.close()
        echo.close()


async def test_wrong_tags_and_unregistered_phantoms_get_silence_until_the_deadline():
    echo, echo_port = await start_echo_server()
    secret = new_secret()
    phantom = str(select_phantom(derive_keys(secret).seed, CONFIG, False).address)
    targets = iter([(phantom, 443), ("198.19.200.200", 443)])
    station, app, registrar = await station_with(lambda: next(targets))
    try:
        await post(registrar, build_registration(secret, "min", f"127.0.0.1:{echo_port}", 1))
        for probe in (b"\x00" * 32 + b"GET / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n"):
            reader, writer = await asyncio.open_connection(*app.sockets[0].getsockname()[:2])
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            writer.write(probe)
            got = await asyncio.wait_for(reader.read(100), 5)  # nothing, then the close
            assert got == b"" and 0.25 < loop.time() - t0 < 2
            writer.close()
        assert station.stats.discarded == 2 and station.stats.matched == 0
    finally:
        await registrar.close()
        app.close()
        echo.close()


async def test_the_registrar_trusts_forwarded_addresses_from_the_edge_only():
    station, app, registrar = await station_with(lambda: ("198.19.200.130", 443))
    try:
        assert (await post(registrar, build_registration(
            new_secret(), "min", "198.18.7.2:80", 1), xff="203.0.113.5, 198.18.0.1"))[0] == 204
        (reg,) = list(station.registry)
        assert str(reg.client) == "198.18.0.1"  # the last entry: what the edge saw
    finally:
        await registrar.close()
        app.close()
    station, app, registrar = await station_with(lambda: ("198.19.200.130", 443), trusted=())
    try:
        await post(registrar, build_registration(new_secret(), "min", "198.18.7.2:80", 1),
                   xff="198.18.0.1")
        (reg,) = list(station.registry)
        assert str(reg.client) == "127.0.0.1"
    finally:
        await registrar.close()
        app.close()


async def test_refusals_are_400_with_the_reason():
    station, app, registrar = await station_with(lambda: ("198.19.200.130", 443), live=True)
    try:
        data = build_registration(new_secret(), "min", "198.18.7.2:80", 1)
        status, text = await post(registrar, data)
        assert status == 400 and "live host" in text
        assert list(station.registry) == []
        status, text = await post(registrar, data)
        assert status == 400 and "replayed" in text
        status, text = await post(registrar, build_registration(
            new_secret(), "min", "192.168.1.1:22", 1))
        assert status == 400 and "not allowed" in text
        status, text = await post(registrar, b"\xff" * 40)
        assert status == 400
    finally:
        await registrar.close()
        app.close()
