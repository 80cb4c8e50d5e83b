"""Our proxy's polling loop against a scripted broker (no WebRTC needed)."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from transports.snowflake import messages as m
from transports.snowflake.proxy import SnowflakeProxy
from transports.snowflake.proxyconfig import ProxyConfig

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
                      min_poll_interval_s=0.01, nat_probe_url="")
    proxy = await run_proxy(cfg, lambda: len(polls) >= 4)
    await server.close()
    first = polls[0]
    assert list(first) == ["Sid", "Version", "Type", "NAT", "Clients", "AcceptedRelayPattern"]
    assert first["Version"] == "1.3" and first["Type"] == "standalone"
    assert first["AcceptedRelayPattern"] == "snowflake.torproject.net$"
    assert len(first["Sid"]) == 22  # 16 random bytes, unpadded base64
    # 2.14.1: a new Sid for every poll, "no match" or not (2.5.1 kept one across them;
    # measured: five polls of Tor's proxy, five Sids, docs/transports/snowflake.md §9)
    assert len({p["Sid"] for p in polls}) == len(polls)
    assert answers == [] and proxy.stats.refused_relays == 1


async def test_the_wait_after_each_answer_is_nextpoll_a_match_included_as_2_14s():
    """2.14.1 resets its ticker to max(1 s, NextPoll) when each answer comes, a match
    included; NextPoll absent or 0 means its own interval (2.5.1 polled at once after
    a match and ignored NextPoll)."""
    import time

    times: list[float] = []
    replies = [m.ProxyPollResponse(m.STATUS_MATCH, OFFER, "unknown", "wss://evil.example/", 300),
               m.ProxyPollResponse(m.STATUS_NO_MATCH, next_poll_ms=0),
               m.ProxyPollResponse(m.STATUS_NO_MATCH, next_poll_ms=50),
               m.ProxyPollResponse(m.STATUS_NO_MATCH, next_poll_ms=1)]

    async def proxy_ep(request: web.Request) -> web.Response:
        times.append(time.monotonic())
        await request.read()
        reply = replies.pop(0) if replies else m.ProxyPollResponse(m.STATUS_NO_MATCH,
                                                                    next_poll_ms=1)
        return web.Response(body=reply.encode())

    app = web.Application()
    app.router.add_post("/proxy", proxy_ep)
    server = TestServer(app)
    await server.start_server()
    cfg = ProxyConfig(broker=str(server.make_url("/")), stun=[], poll_interval_s=0.2,
                      min_poll_interval_s=0.1, nat_probe_url="")
    await run_proxy(cfg, lambda: len(times) >= 5)
    await server.close()
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert 0.28 <= gaps[0] < 0.5, gaps  # after the match: its NextPoll, 300 ms
    assert 0.18 <= gaps[1] < 0.35, gaps  # NextPoll 0: the proxy's own 200 ms
    assert 0.09 <= gaps[2] < 0.2, gaps   # 50 ms, raised to the 100 ms floor
    assert 0.09 <= gaps[3] < 0.2, gaps   # 1 ms, likewise


async def test_no_polls_while_the_default_relay_is_unreachable_as_2_12s():
    """Tor's proxy (2.12+) opens a WebSocket to its default relay before polling and
    polls only while that works (measured: with the relay down, not one poll)."""
    polls: list[bytes] = []
    upgrades: list[str] = []
    relay_up = False

    async def proxy_ep(request: web.Request) -> web.Response:
        polls.append(await request.read())
        return web.Response(body=m.ProxyPollResponse(m.STATUS_NO_MATCH,
                                                     next_poll_ms=10).encode())

    async def relay(request: web.Request) -> web.StreamResponse:
        if not relay_up:
            return web.Response(status=503)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        upgrades.append(request.query_string)
        # A bridge waits for the Turbo Tunnel preamble and answers no closing
        # handshake; the check must not wait for one (it once took 10 s here).
        await asyncio.sleep(5)
        return ws

    app = web.Application()
    app.router.add_post("/proxy", proxy_ep)
    app.router.add_get("/relay/", relay)
    server = TestServer(app)
    await server.start_server()
    cfg = ProxyConfig(broker=str(server.make_url("/")), relay=str(server.make_url("/relay/")),
                      stun=[], poll_interval_s=0.05, min_poll_interval_s=0.01,
                      nat_probe_url="", check_relay_reachable=True,
                      relay_recheck_min_s=0.3, relay_recheck_max_s=60)
    proxy = SnowflakeProxy(cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(proxy.run(stop))
    await asyncio.sleep(0.25)
    assert polls == [] and not proxy.relay_reachable
    relay_up = True
    for _ in range(100):  # the recheck after relay_recheck_min_s finds it up
        if polls:
            break
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(task, 5)
    await server.close()
    assert polls and proxy.relay_reachable
    assert upgrades == [""]  # the check names no client (no ?client_ip=)


async def test_the_proxy_backs_off_while_the_broker_is_down_and_recovers(caplog):
    """The broker answers errors, then comes back: polls thin out (doubling waits up to
    backoff_max_s), log lines only at 1, 2, 4, ... failures, and once it is back the
    proxy polls at its interval and takes the next client."""
    import logging
    import time

    down = True
    times: list[float] = []
    replies = [m.ProxyPollResponse(m.STATUS_MATCH, OFFER, "unknown", "wss://evil.example/", 10)]

    async def proxy_ep(request: web.Request) -> web.Response:
        times.append(time.monotonic())
        await request.read()
        if down:
            return web.Response(status=503, text="down for maintenance")
        reply = replies.pop(0) if replies else m.ProxyPollResponse(m.STATUS_NO_MATCH,
                                                                    next_poll_ms=10)
        return web.Response(body=reply.encode())

    app = web.Application()
    app.router.add_post("/proxy", proxy_ep)
    server = TestServer(app)
    await server.start_server()
    cfg = ProxyConfig(broker=str(server.make_url("/")), stun=[], poll_interval_s=0.05,
                      backoff_max_s=0.4, nat_probe_url="")
    proxy = SnowflakeProxy(cfg)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO, logger="snowflake-proxy")
    task = asyncio.create_task(proxy.run(stop))
    await asyncio.sleep(2.0)
    down_polls = len(times)
    gaps = [round(b - a, 2) for a, b in zip(times, times[1:], strict=False)]
    down = False
    for _ in range(100):
        if proxy.stats.refused_relays:
            break
        await asyncio.sleep(0.02)
    recovered_after = time.monotonic() - times[down_polls - 1]
    stop.set()
    await asyncio.wait_for(task, 5)
    await server.close()
    # Without backoff, 2 s at 0.05 s would be 40 polls; doubling to 0.4 s gives ~8.
    assert 5 <= down_polls <= 10, gaps
    assert gaps[0] < gaps[2] and max(gaps) <= 0.5, gaps  # doubling, capped
    assert proxy.stats.broker_errors == down_polls
    warnings = [r for r in caplog.records if "error polling broker" in r.getMessage()]
    assert len(warnings) <= 4, [r.getMessage() for r in warnings]  # 1, 2, 4, 8 only
    assert any("reachable again" in r.getMessage() for r in caplog.records)
    # Back: it polled within one capped wait and handled the next client's offer.
    assert recovered_after <= 0.5 + 0.5 and proxy.stats.refused_relays == 1


async def test_a_summary_line_comes_at_each_interval_with_that_window_only(caplog):
    """Tor's summary line, every summary_interval_s, counting only its own window."""
    import logging
    import re

    server, _, _ = await scripted_broker([])
    cfg = ProxyConfig(broker=str(server.make_url("/")), stun=[], poll_interval_s=0.05,
                      nat_probe_url="", summary_interval_s=0.2)
    proxy = SnowflakeProxy(cfg)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO, logger="snowflake-proxy")
    task = asyncio.create_task(proxy.run(stop))
    await asyncio.sleep(0.01)  # running: the first window has begun
    proxy.stats.completed += 3
    proxy.stats.outbound_bytes += 2048 * 1024
    proxy.stats.inbound_bytes += 512 * 1024
    await asyncio.sleep(0.5)
    stop.set()
    await asyncio.wait_for(task, 5)
    await server.close()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("In the last")]
    assert len(lines) >= 2, lines
    assert lines[0] == ("In the last 0.2s, there were 3 completed successful connections. "
                        "Traffic Relayed ↓ 2048 KB (10240.00 KB/s), ↑ 512 KB (2560.00 KB/s).")
    assert lines[1].startswith("In the last 0.2s, there were 0 completed successful "
                               "connections. Traffic Relayed ↓ 0 KB (0.00 KB/s)"), lines
    assert all(re.fullmatch(r"In the last \S+, there were \d+ completed successful connections\."
                            r" Traffic Relayed ↓ \d+ KB \(\d+\.\d\d KB/s\), ↑ \d+ KB "
                            r"\(\d+\.\d\d KB/s\)\.", x) for x in lines)


def test_durations_are_written_as_go_writes_them():
    from transports.snowflake.summary import go_duration_text

    assert [go_duration_text(s) for s in (3600, 90, 45, 1.5, 86400, 0.2)] == [
        "1h0m0s", "1m30s", "45s", "1.5s", "24h0m0s", "0.2s"]


def test_the_summary_interval_flag_takes_go_durations():
    from transports.snowflake.proxy_cli import config_from_args, parse_args

    assert config_from_args(parse_args([])).summary_interval_s == 3600
    assert config_from_args(parse_args(["-summary-interval", "10m"])).summary_interval_s == 600
    assert config_from_args(parse_args(["-summary-interval", "0"])).summary_interval_s == 0


async def test_at_capacity_the_proxy_stops_polling_and_resumes_when_a_client_leaves():
    """-capacity N: with N clients it does not poll (no offer it could not serve),
    and polls again once one leaves, as Tor's proxy does with its tokens."""
    replies = [m.ProxyPollResponse(m.STATUS_MATCH, OFFER, "unknown", "", 10)]
    server, polls, _ = await scripted_broker(replies)
    cfg = ProxyConfig(broker=str(server.make_url("/")), stun=[], poll_interval_s=0.05,
                      nat_probe_url="", capacity=1, summary_interval_s=0)
    proxy = SnowflakeProxy(cfg)
    release = asyncio.Event()

    async def held_session(sid, match):  # a client that stays connected
        await release.wait()

    proxy.session = held_session  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(proxy.run(stop))
    for _ in range(200):
        if proxy.clients:
            break
        await asyncio.sleep(0.01)
    assert proxy.clients == 1
    await asyncio.sleep(0.05)
    held_polls = len(polls)
    await asyncio.sleep(0.5)
    assert len(polls) == held_polls  # full: no polls for 0.5 s (10 intervals)
    release.set()
    for _ in range(300):
        if len(polls) > held_polls:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    await server.close()
    assert len(polls) > held_polls and proxy.clients == 0


async def test_stopping_ends_every_client_session():
    """What SIGTERM sets off (proxy_cli sets the stop event): sessions in progress are
    cancelled and awaited, so each closes its peer connection, and run() returns."""
    replies = [m.ProxyPollResponse(m.STATUS_MATCH, OFFER, "unknown", "", 10)
               for _ in range(3)]
    server, _, _ = await scripted_broker(replies)
    cfg = ProxyConfig(broker=str(server.make_url("/")), stun=[], poll_interval_s=0.05,
                      nat_probe_url="", summary_interval_s=0)
    proxy = SnowflakeProxy(cfg)
    ended: list[str] = []

    async def held_session(sid, match):
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(sid)

    proxy.session = held_session  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(proxy.run(stop))
    for _ in range(300):
        if proxy.clients == 3:
            break
        await asyncio.sleep(0.01)
    assert proxy.clients == 3
    stop.set()
    await asyncio.wait_for(task, 5)
    await server.close()
    assert len(ended) == 3 and proxy.clients == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_stops_the_proxy_cleanly(workers):
    """The CLI under SIGTERM: exit status 0 within seconds, no traceback, and (with
    worker processes) no worker left behind."""
    import signal
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    proc = subprocess.Popen(
        [sys.executable, "-m", "ptlab", "snowflake-proxy", "-broker", "http://127.0.0.1:9/",
         "-relay", "ws://127.0.0.1:9/", "-allow-non-tls-relay", "-nat-probe-server", "",
         "-workers", str(workers)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[3])
    children: list[str] = []
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        # Started (its log says so, with its workers up), not a guess at how long a
        # loaded machine takes to get there.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            if (any("proxy starting" in line for line in lines)
                    and len(children) == (0 if workers == 1 else workers)):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "".join(lines)[-2000:]
        assert len(children) == (0 if workers == 1 else workers), "".join(lines)[-2000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    err = "".join(lines)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert f"{workers} worker process" in err
    time.sleep(0.2)
    assert [c for c in children if Path(f"/proc/{c}").exists()] == []
