"""Our proxy's polling loop against a scripted broker (no WebRTC needed)."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from aiohttp.test_utils import TestServer

from transports.snowflake import messages as m
from transports.snowflake.proxy import ProxyConfig, ProxyStats, SnowflakeProxy

OFFER = m.encode_sdp("offer", "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\n")


async def scripted_broker(replies: list[m.ProxyPollResponse]):
    polls: list[dict] = []
    answers: list[bytes] = []

    async def proxy(request: web.Request) -> web.Response:
        polls.append(json.loads(await request.read()))
        reply = replies.pop(0) if replies else m.ProxyPollResponse(m.STATUS_NO_MATCH,
                                                                    next_poll_ms=20)
        return web.Response(body=reply.encode())

    async def answer(request: web.Request) -> web.Response:
        answers.append(await request.read())
        return web.Response(body=m.encode_answer_response(m.STATUS_SUCCESS))

    app = web.Application()
    app.router.add_post("/proxy", proxy)
    app.router.add_post("/answer", answer)
    server = TestServer(app)
    await server.start_server()
    return server, polls, answers


async def run_proxy(cfg: ProxyConfig, until) -> SnowflakeProxy:
    proxy = SnowflakeProxy(cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(proxy.run(stop))
    for _ in range(300):
        if until():
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    return proxy


async def test_polls_are_tor_shaped_and_a_bad_relay_is_refused_without_answering():
    replies = [m.ProxyPollResponse(m.STATUS_NO_MATCH, next_poll_ms=10),
               m.ProxyPollResponse(m.STATUS_MATCH, OFFER, "unknown", "wss://evil.example/", 10),
               m.ProxyPollResponse(m.STATUS_NO_MATCH, next_poll_ms=10)]
    server, polls, answers = await scripted_broker(replies)
    cfg = ProxyConfig(broker=str(server.make_url("/")), stun=[], poll_interval_s=5.0,
                      nat_probe_url="")
    proxy = await run_proxy(cfg, lambda: len(polls) >= 4)
    await server.close()
    first = polls[0]
    assert list(first) == ["Sid", "Version", "Type", "NAT", "Clients", "AcceptedRelayPattern"]
    assert first["Version"] == "1.3" and first["Type"] == "standalone"
    assert first["AcceptedRelayPattern"] == "snowflake.torproject.net$"
    assert len(first["Sid"]) == 22  # 16 random bytes, unpadded base64
    assert polls[1]["Sid"] == polls[0]["Sid"]  # kept across "no match"
    assert polls[2]["Sid"] != polls[1]["Sid"]  # renewed after a match
    assert answers == [] and proxy.stats.refused_relays == 1


def test_prometheus_names_follow_tor():
    text = ProxyStats(connections=2, inbound_bytes=10).prometheus()
    assert "tor_snowflake_proxy_connections_total 2" in text
    assert "tor_snowflake_proxy_traffic_inbound_bytes_total 10" in text
    assert "# TYPE tor_snowflake_proxy_connection_timeouts_total counter" in text
