"""Polymorphic shaping: the seed decides lengths (and gaps); bursts end on a sampled
segment length; the client adopts the server's seed."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.support.echo import echo
from transports.common.probdist import WeightedDist
from transports.scramblesuit.framing import MAX_SEGMENT, OVERHEAD
from transports.scramblesuit.shaping import Shaping
from transports.scramblesuit.tickets import TicketIssuer
from transports.scramblesuit.transport import (
    ScrambleSuitClientFactory,
    ScrambleSuitServerFactory,
    TicketStore,
)


def test_the_length_table_is_obfs4s_biased_table_from_the_first_24_bytes():
    seed = bytes(range(32))
    want = WeightedDist(seed[:24], OVERHEAD, MAX_SEGMENT, biased=True)
    got = Shaping(seed).lengths
    assert (got.values, got.prob, got.alias) == (want.values, want.prob, want.alias)
    other = Shaping(os.urandom(32))
    other.reseed(seed)
    assert other.lengths.values == want.values


@pytest.mark.parametrize("burst", [0, 1, 500, 1447, 1448, 1449, 5000])
def test_bursts_end_on_a_sampled_segment_length(burst):
    shaping = Shaping(os.urandom(32))
    for _ in range(50):
        pad = shaping.pad_length(burst)
        assert pad == 0 or pad >= OVERHEAD
        tail = (burst + pad) % MAX_SEGMENT
        assert tail in set(v + OVERHEAD for v in shaping.lengths.values) | {0}


async def _transfer(iat_mode: int, size: int) -> None:
    server = ScrambleSuitServerFactory(os.urandom(20), TicketIssuer(), iat_mode=iat_mode)

    async def handle(reader, writer):
        await echo(*await server.wrap(reader, writer))

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    client = ScrambleSuitClientFactory(server.k_b, TicketStore(None))
    reader, writer = await client.dial("127.0.0.1", port)
    data = os.urandom(size)
    writer.write(data)
    assert await asyncio.wait_for(reader.readexactly(size), 30) == data
    writer.close()
    srv.close()


def test_gaps_are_seeded_and_bounded():
    assert Shaping(os.urandom(32)).gap_s() == 0.0  # iat-mode 0: no gaps
    paced = Shaping(bytes(32), iat_mode=1)
    gaps = [paced.gap_s() for _ in range(500)]
    assert all(0.0 <= g <= 0.01 for g in gaps) and len(set(gaps)) > 1


@pytest.mark.parametrize("iat_mode", [0, 1])
async def test_both_modes_deliver_byte_exact(iat_mode):
    await _transfer(iat_mode, 100_000)


def test_the_server_keeps_its_password_and_writes_a_bridge_line(tmp_path):
    from transports.scramblesuit.transport import TRANSPORT, decode_password
    a = TRANSPORT.server_factory(tmp_path, {})
    line = (tmp_path / "scramblesuit_bridgeline.txt").read_text().splitlines()[-1]
    assert line.startswith("Bridge scramblesuit <IP ADDRESS>:<PORT> <FINGERPRINT> password=")
    assert decode_password(line.rsplit("=", 1)[1]) == a.k_b
    assert TRANSPORT.server_factory(tmp_path, {}).k_b == a.k_b  # kept across restarts
    assert a.smethod_args()["password"] == line.rsplit("password=", 1)[1]
