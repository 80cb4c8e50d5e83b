"""Frolov's trees and the threshold search against toy servers on loopback."""

from __future__ import annotations

import pytest

from censor_sim.prober.observe import run_suite
from censor_sim.prober.probes import frolov_suite
from censor_sim.prober.threshold import find_threshold
from censor_sim.prober.trees import Timing, label
from tests.support.toyserver import ToyServer


@pytest.fixture
def toy():
    servers: list[ToyServer] = []

    def make(**kw) -> ToyServer:
        servers.append(ToyServer(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


async def labelled(port: int) -> str:
    probes = frolov_suite(seed=1)
    results = await run_suite("127.0.0.1", port, probes, watch_s=1.0)
    return label(results, [len(p.payload) for p in probes], Timing(scale=0.1))


async def test_outline_like_server_is_labelled_outline(toy):
    assert await labelled(toy(threshold=50).port) == "shadowsocks-outline"


async def test_read_forever_server_is_unidentifiable_mtproto_like(toy):
    assert await labelled(toy(threshold=None).port) == "mtproto"


async def test_http_server_is_not_a_proxy(toy):
    assert await labelled(toy(http=True).port) == "not-proxy"


@pytest.mark.parametrize("n", [50, 1000])
async def test_threshold_search_recovers_the_close_threshold(toy, n):
    found = await find_threshold("127.0.0.1", toy(threshold=n).port, window=0.3)
    assert found.bytes == n and found.close == "FIN"
    assert len(found.probes) <= 16


async def test_no_threshold_on_a_read_forever_server(toy):
    found = await find_threshold("127.0.0.1", toy(threshold=None).port, window=0.2,
                                 maximum=8192)
    assert found.bytes is None
