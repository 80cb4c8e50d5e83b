"""The NAT probe exchange (Tor's probetest, docs/transports/snowflake.md §3.5) on
loopback: our probe client against our probe service, Tor's message shapes, the
three outcomes, and the proxy reporting what it learned in its polls."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transports.snowflake import messages as m
from transports.snowflake.natprobe import ProbeService, probe_nat
from transports.snowflake.proxy import SnowflakeProxy
from transports.snowflake.proxyconfig import ProxyConfig


async def serve(app: web.Application) -> TestServer:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


@pytest.mark.network
async def test_a_reachable_proxy_is_unrestricted():
    service = ProbeService(keep_local_addresses=True)
    server = await serve(service.app())
    try:
        async with aiohttp.ClientSession() as http:
            nat = await probe_nat(http, str(server.make_url("/probe")), [], timeout_s=10,
                                  keep_local_addresses=True)
        assert nat == m.NAT_UNRESTRICTED
        assert (service.probes, service.opened) == (1, 1)
    finally:
        await server.close()


async def test_tor_shaped_request_and_a_channel_that_never_opens_means_restricted():
    """The service answers but its peer is gone before ICE can finish."""
    from aiortc import RTCPeerConnection, RTCSessionDescription

    seen: list[bytes] = []

    async def probe(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append(body)
        offer = m.decode_sdp(m.ProxyPollResponse.decode(body).offer, "offer")
        pc = RTCPeerConnection()
        await pc.setRemoteDescription(RTCSessionDescription(offer, "offer"))
        await pc.setLocalDescription(await pc.createAnswer())
        answer = pc.localDescription.sdp
        await pc.close()
        return web.Response(body=m.AnswerRequest("stub-sid", m.encode_sdp("answer", answer))
                            .encode())

    app = web.Application()
    app.router.add_post("/probe", probe)
    server = await serve(app)
    try:
        async with aiohttp.ClientSession() as http:
            nat = await probe_nat(http, str(server.make_url("/probe")), [], timeout_s=2,
                                  keep_local_addresses=True)
        assert nat == m.NAT_RESTRICTED
        doc = json.loads(seen[0])
        assert list(doc) == ["Status", "Offer", "NAT", "RelayURL"]
        assert (doc["Status"], doc["NAT"], doc["RelayURL"]) == ("client match", "", "")
        assert json.loads(doc["Offer"])["type"] == "offer"
    finally:
        await server.close()


async def test_a_failed_exchange_is_unknown():
    async def status_500(_: web.Request) -> web.Response:
        return web.Response(status=500)

    async def garbage(_: web.Request) -> web.Response:
        return web.Response(body=b'{"Version":"1.3","Sid":"stub-sid"}')

    app = web.Application()
    app.router.add_post("/500", status_500)
    app.router.add_post("/garbage", garbage)
    server = await serve(app)
    try:
        async with aiohttp.ClientSession() as http:
            for path in ("/500", "/garbage", "/missing"):
                assert await probe_nat(http, str(server.make_url(path)), [], timeout_s=2,
                                       keep_local_addresses=True) == m.NAT_UNKNOWN
            port = server.port
        await server.close()
        async with aiohttp.ClientSession() as http:  # nothing listens any more
            assert await probe_nat(http, f"http://127.0.0.1:{port}/probe", [],
                                   timeout_s=2) == m.NAT_UNKNOWN
    finally:
        await server.close()


async def test_the_service_refuses_bad_probes_clearly():
    service = ProbeService()
    server = await serve(service.app())
    url = str(server.make_url("/probe"))
    try:
        async with aiohttp.ClientSession() as http:
            for body, why in [(b"not json", "poll response"),
                              (m.ProxyPollResponse(m.STATUS_NO_MATCH).encode(), "client match"),
                              (m.ProxyPollResponse(m.STATUS_MATCH, offer='{"type":"answer",'
                                                   '"sdp":"v=0"}').encode(), "offer")]:
                async with http.post(url, data=body) as r:
                    assert r.status == 400, body
                    assert why in (await r.json())["error"]
            async with http.post(url, data=b"x" * 200_000) as r:
                assert r.status == 413
        assert service.probes == 0
    finally:
        await server.close()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(st.binary(max_size=300),
                      st.builds(lambda s: m.ProxyPollResponse(m.STATUS_MATCH, offer=s).encode(),
                                st.text(max_size=200))))
def test_fuzzed_probes_never_break_the_service(body):
    async def one() -> None:
        service = ProbeService()
        server = await serve(service.app())
        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(server.make_url("/probe"), data=body) as r:
                    assert r.status in (200, 400), r.status
                good = m.ProxyPollResponse(m.STATUS_MATCH, offer="{}").encode()
                async with http.post(server.make_url("/probe"), data=good) as r:
                    assert r.status == 400  # still answering
        finally:
            await server.close()

    asyncio.run(one())


@pytest.mark.network
async def test_the_proxy_polls_with_the_type_the_probe_found():
    service = ProbeService(keep_local_addresses=True)
    probe = await serve(service.app())
    polls: list[dict] = []

    async def proxy(request: web.Request) -> web.Response:
        polls.append(json.loads(await request.read()))
        return web.Response(body=m.ProxyPollResponse(m.STATUS_NO_MATCH, next_poll_ms=10)
                            .encode())

    app = web.Application()
    app.router.add_post("/proxy", proxy)
    broker = await serve(app)
    try:
        for url, start, want in [(str(probe.make_url("/probe")), "unknown", "unrestricted"),
                                 (f"http://127.0.0.1:{broker.port}/nothing", "restricted",
                                  "restricted")]:  # unknown keeps what we had
            polls.clear()
            proxy_ = SnowflakeProxy(ProxyConfig(
                broker=str(broker.make_url("/")), stun=[], nat=start, nat_probe_url=url,
                nat_probe_timeout_s=5, keep_local_addresses=True, poll_interval_s=0.05))
            stop = asyncio.Event()
            task = asyncio.create_task(proxy_.run(stop))
            for _ in range(500):
                if polls:
                    break
                await asyncio.sleep(0.02)
            stop.set()
            await asyncio.wait_for(task, 5)
            assert polls and polls[0]["NAT"] == want, (url, polls[:1])
    finally:
        await broker.close()
        await probe.close()
