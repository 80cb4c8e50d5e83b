"""The prober's source-address pool: every probe connection from its own address."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from censor_sim.prober.observe import observe, run_suite
from censor_sim.prober.probes import Probe
from censor_sim.prober.sources import SourcePool


def test_a_small_prefix_hands_out_every_host_once_per_round():
    pool = SourcePool(["198.19.250.0/29"], seed=3)
    first = [pool.pick(socket.AF_INET) for _ in range(6)]
    assert sorted(first, key=ipaddress.ip_address) == [f"198.19.250.{i}" for i in range(1, 7)]
    second = [pool.pick(socket.AF_INET) for _ in range(6)]
    assert set(second) == set(first) and second != first  # a new random order
    assert SourcePool(["198.19.250.0/29"], seed=3).pick(socket.AF_INET) == first[0]


def test_an_ipv6_prefix_is_sampled_and_a_missing_family_gives_none():
    pool = SourcePool(["2001:db8:fa00::/64"])
    picks = {pool.pick(socket.AF_INET6) for _ in range(50)}
    assert len(picks) == 50
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network("2001:db8:fa00::/64")
               for a in picks)
    assert pool.pick(socket.AF_INET) is None
    assert not SourcePool([])


@pytest.mark.parametrize("prefixes, msg", [
    (["198.19.250.1/24"], "has host bits set"),
    (["not-a-prefix"], "does not appear to be"),
    (["198.19.250.0/24", "198.19.251.0/24"], "two IPv4 prefixes"),
    (["198.19.250.0/31"], "too small"),
])
def test_bad_pools_are_refused_clearly(prefixes, msg):
    with pytest.raises(ValueError, match=msg):
        SourcePool(prefixes)


def _server() -> tuple[socket.socket, int, list[str]]:
    seen: list[str] = []
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    return srv, srv.getsockname()[1], seen


def test_probes_come_from_distinct_pool_addresses_and_record_them():
    srv, port, seen = _server()

    async def main() -> list:
        loop = asyncio.get_running_loop()
        srv.setblocking(False)

        async def accept() -> None:
            while True:
                conn, peer = await loop.sock_accept(srv)
                seen.append(peer[0])
                conn.close()

        task = asyncio.create_task(accept())
        pool = SourcePool(["127.77.0.0/24"], seed=1)  # 127/8 is local everywhere
        probes = [Probe(f"p{i}", b"x" * 10) for i in range(8)]
        res = await run_suite("127.0.0.1", port, probes, watch_s=1.0,
                              sock_factory=pool.factory)
        task.cancel()
        return res

    results = asyncio.run(main())
    srv.close()
    sources = [r.source for r in results]
    assert len(set(sources)) == 8 and sorted(sources) == sorted(seen)
    assert all(s.startswith("127.77.0.") for s in sources)


def test_a_pool_the_node_does_not_own_is_a_clear_probe_error():
    pool = SourcePool(["198.19.250.0/24"])  # no local route for it here
    r = asyncio.run(observe("127.0.0.1", 9, Probe("p", b"x"), 0.5, sock_factory=pool.factory))
    assert r.close == "ERROR" and "cannot bind probe source" in r.error


def test_an_ipv6_pool_binds_without_configuring_each_address():
    """IPv6 refuses to bind an address that a local route covers but no interface
    carries, unless the socket may bind freely: the lab prober's IPv6 probes failed so."""
    pool = SourcePool(["2001:db8:fa00::/64"], seed=3)
    sock = pool.factory(socket.AF_INET6)
    try:
        bound = sock.getsockname()[0]
    finally:
        sock.close()
    assert bound == pool.used[-1]
    assert ipaddress.ip_address(bound) in ipaddress.ip_network("2001:db8:fa00::/64")
