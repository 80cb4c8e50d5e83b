"""Client rendezvous through our broker: direct, domain-fronted through an edge
that routes by Host, and through an AMP cache; errors; bridge-line arguments."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from broker.app import Broker, BrokerConfig
from broker.bridges import Bridge
from transports.base import TransportError
from transports.snowflake import messages as m
from transports.snowflake.client import config_from_args
from transports.snowflake.rendezvous import (
    Rendezvous,
    RendezvousConfig,
    RendezvousError,
    amp_cache_url,
)

FP = m.DEFAULT_BRIDGE_FINGERPRINT
OFFER_SDP = "v=0\r\no=- 1 1 IN IP4 198.18.0.2\r\ns=-\r\n"
ANSWER_SDP = "v=0\r\no=- 2 2 IN IP4 198.18.11.2\r\na=setup:active\r\n"


@pytest.fixture
async def broker():
    b = Broker(BrokerConfig(proxy_timeout_s=2, client_timeout_s=1,
                            allowed_relay_pattern="^snowflake.lab$",
                            default_relay_pattern="^snowflake.lab$",
                            bridges={FP: Bridge("one", "wss://snowflake.lab/", FP)},
                            rate_per_s=1000.0, burst=1000.0))
    server = TestServer(b.app(), host="127.0.0.1")
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}"
    await server.close()


async def answering_proxy(broker_url: str, seen: list[str]) -> None:
    """One proxy poll; answer the offer it is given."""
    async with aiohttp.ClientSession() as http:
        for _ in range(20):
            body = m.ProxyPoll("sid1", "standalone", "unrestricted", 0, "^snowflake.lab$").encode()
            async with http.post(broker_url + "/proxy", data=body) as r:
                resp = m.ProxyPollResponse.decode(await r.read())
            if resp.status == m.STATUS_MATCH:
                seen.append(m.decode_sdp(resp.offer, "offer"))
                req = m.AnswerRequest("sid1", m.encode_sdp("answer", ANSWER_SDP)).encode()
                async with http.post(broker_url + "/answer", data=req) as r:
                    assert r.status == 200
                return


async def forwarder(target: str, rewrite, hosts: list[str]) -> TestServer:
    """A reverse proxy (the CDN edge or the AMP cache) that records Host headers."""
    async def handle(request: web.Request) -> web.Response:
        hosts.append(request.headers.get("Host", ""))
        async with aiohttp.ClientSession() as http:
            async with http.request(request.method, target + rewrite(request.path_qs),
                                    data=await request.read()) as r:
                return web.Response(status=r.status, body=await r.read())
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


async def exchange(cfg: RendezvousConfig, broker_url: str) -> tuple[str, list[str]]:
    seen: list[str] = []
    proxy = asyncio.create_task(answering_proxy(broker_url, seen))
    await asyncio.sleep(0.05)
    answer = await Rendezvous(cfg).exchange(OFFER_SDP)
    await proxy
    return answer, seen


async def test_direct(broker):
    answer, seen = await exchange(RendezvousConfig(broker + "/"), broker)
    assert answer == ANSWER_SDP and seen == [OFFER_SDP]


async def test_domain_fronted_through_an_edge(broker):
    hosts: list[str] = []
    edge = await forwarder(broker, lambda p: p, hosts)
    # The URL names the broker; TCP goes to the front, and the edge sees Host = broker.
    url = f"http://broker.lab.invalid:{edge.port}/"
    answer, _ = await exchange(RendezvousConfig(url, front="127.0.0.1"), broker)
    assert answer == ANSWER_SDP
    assert hosts == [f"broker.lab.invalid:{edge.port}"]
    await edge.close()


async def test_amp_cache(broker):
    hosts: list[str] = []
    netloc = broker.removeprefix("http://")
    cache = await forwarder(broker, lambda p: p.removeprefix(f"/c/{netloc}"), hosts)
    cache_url = f"http://127.0.0.1:{cache.port}/"
    assert amp_cache_url(broker + "/", cache_url) == f"{cache_url}c/{netloc}"
    answer, _ = await exchange(RendezvousConfig(broker + "/", amp_cache=cache_url), broker)
    assert answer == ANSWER_SDP and len(hosts) == 1
    await cache.close()


async def test_no_proxies_and_unreachable_broker_are_clear_errors(broker):
    with pytest.raises(RendezvousError, match="no snowflake proxies"):
        await Rendezvous(RendezvousConfig(broker + "/")).exchange(OFFER_SDP)
    with pytest.raises(RendezvousError, match="unreachable"):
        await Rendezvous(RendezvousConfig("http://127.0.0.1:9/")).exchange(OFFER_SDP)


def test_bridge_line_arguments():
    cfg = config_from_args({"url": "https://broker.lab/", "front": "cdn.lab",
                            "ice": "stun:198.18.9.2:3478,stun:198.18.9.3:3478", "max": "3",
                            "fingerprint": FP})
    assert cfg.max_peers == 3 and cfg.rendezvous.front == "cdn.lab"
    assert len(cfg.ice_servers()) == 2
    for bad in ({}, {"url": "ftp://x/"}, {"url": "https://b/", "ice": "http://x"},
                {"url": "https://b/", "max": "0"}, {"url": "https://b/", "max": "many"},
                {"url": "https://b/", "front": "a/b"}):
        with pytest.raises(TransportError):
            config_from_args(bad)
