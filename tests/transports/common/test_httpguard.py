"""The HTTP guard: head and body deadlines, the waiting cap, the connection cap and
an early 413, on a real aiohttp server on loopback (timers shortened)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import aiohttp
import pytest
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from transports.common.budget import QuietErrors
from transports.common.httpguard import (
    LIMIT_OPTIONS,
    HttpGuard,
    HttpLimits,
    PrivateServerLog,
    add_limit_arguments,
    limit_options,
    limits_from_options,
    serve,
)


async def start(limits: HttpLimits, slow_s: float = 0.0):
    app = web.Application()

    async def hello(request: web.Request) -> web.Response:
        await asyncio.sleep(slow_s)  # a long poll: being served, not waiting
        return web.Response(text="hello")

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    app.router.add_get("/", hello)
    app.router.add_post("/", echo)
    guard = HttpGuard(limits)
    runner, server = await serve(app, "127.0.0.1", 0, guard=guard)
    return guard, runner, server, server.sockets[0].getsockname()[1]


async def stop(runner, server) -> None:
    server.close()
    await runner.cleanup()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), seconds) == b""
    except (TimeoutError, ConnectionResetError):
        return False


async def being_served(guard: HttpGuard, count: int, within_s: float = 5.0) -> None:
    """Wait until ``count`` connections are open and none waits for its head (their
    requests are in the application), instead of guessing how long that takes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while len(guard.open) != count or guard.waiting:
        assert loop.time() < deadline, (len(guard.open), len(guard.waiting))
        await asyncio.sleep(0.01)


async def get(port: int) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/") as r:
        return await r.text()


async def test_an_unfinished_head_is_closed_at_its_deadline_and_a_finished_one_is_served():
    guard, runner, server, port = await start(HttpLimits(head_timeout_s=0.3))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finished
        assert not await closed_within(reader, 0.15)  # before the deadline: still open
        assert await closed_within(reader, 1.0)
        assert guard.stats.head_timeouts == 1
        assert await get(port) == "hello"
    finally:
        await stop(runner, server)


async def test_a_long_request_is_not_cut_by_the_head_deadline():
    guard, runner, server, port = await start(HttpLimits(head_timeout_s=0.2), slow_s=0.6)
    try:
        assert await get(port) == "hello"
        assert guard.stats.head_timeouts == 0
    finally:
        await stop(runner, server)


async def test_past_the_waiting_cap_the_longest_waiting_is_closed_and_a_client_gets_in():
    # One address with no share (as a trusted edge): the global cap alone.
    guard, runner, server, port = await start(HttpLimits(head_timeout_s=30, max_waiting=20,
                                                         trusted=("127.0.0.1",)))
    try:
        slow = []
        for _ in range(50):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            slow.append((reader, writer))
        await asyncio.sleep(0.2)
        assert guard.stats.evicted == 30 and len(guard.waiting) == 20
        assert await closed_within(slow[0][0], 1.0)  # the first to come, the first to go
        assert await get(port) == "hello"
        for _, w in slow:
            w.close()
    finally:
        await stop(runner, server)


async def test_a_declared_body_over_the_limit_is_answered_413_before_it_is_read():
    guard, runner, server, port = await start(HttpLimits(max_body=1000))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 413 ")
        assert guard.stats.too_large == 1
        writer.close()
        async with aiohttp.ClientSession() as http:  # at the limit: served
            async with http.post(f"http://127.0.0.1:{port}/", data=b"x" * 1000) as r:
                assert await r.read() == b"x" * 1000
    finally:
        await stop(runner, server)


async def test_a_body_that_trickles_past_its_deadline_is_cut():
    guard, runner, server, port = await start(HttpLimits(body_timeout_s=0.3))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        assert await closed_within(reader, 2.0)
        assert guard.stats.body_timeouts == 1
    finally:
        await stop(runner, server)


async def test_over_the_connection_cap_with_none_waiting_a_new_one_is_refused():
    guard, runner, server, port = await start(HttpLimits(max_connections=2), slow_s=1.0)
    try:
        busy = [asyncio.create_task(get(port)) for _ in range(2)]
        await being_served(guard, 2)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await closed_within(reader, 1.0)
        assert guard.stats.refused == 1
        assert await asyncio.gather(*busy) == ["hello", "hello"]
        writer.close()
    finally:
        await stop(runner, server)


async def test_at_the_cap_an_application_may_shed_one_of_its_own_for_a_newcomer():
    """The Snowflake bridge names the WebSocket silent longest; here the hook sheds
    nothing the first time (the newcomer is refused, as without a hook) and then
    one of the long requests (the newcomer is admitted and served)."""
    guard, runner, server, port = await start(HttpLimits(max_connections=2), slow_s=3.0)
    victims: list[object] = []

    def shed() -> bool:
        if not victims:
            victims.append(None)
            return False
        victim = next(iter(guard.open))
        victims.append(victim)
        victim.transport.close()
        return True
    guard.shed = shed
    # The long requests last 3 s, so the newcomer comes while both are still served,
    # however slow the machine. They are raw sockets, not aiohttp's client: that one
    # sends its GET again on a new connection when the shed one is cut, and the retry
    # (at the cap, with the newcomer still waiting for its head) would evict the
    # newcomer.
    busy = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    try:
        for _, w in busy:
            w.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await being_served(guard, 2)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await closed_within(reader, 1.0)  # the hook shed nothing: refused
        assert (guard.stats.refused, guard.stats.shed) == (1, 0)
        writer.close()
        assert await get(port) == "hello"  # the hook sheds a long request for it
        assert (guard.stats.refused, guard.stats.shed) == (1, 1)
        assert len(victims) == 2  # asked twice, shed once
        answers = [await asyncio.wait_for(r.read(), 10) for r, _ in busy]
        assert sorted(a.startswith(b"HTTP/1.1 200 ") for a in answers) == [False, True]
    finally:
        for _, w in busy:
            w.close()
        await stop(runner, server)


async def test_a_flood_from_one_address_churns_its_own_connections_only():
    guard, runner, server, port = await start(HttpLimits(head_timeout_s=30, max_waiting=40))
    assert guard.limits.per_source == 10
    try:
        # Someone else, slow but honest: half a head, to be finished later.
        honest_r, honest_w = await asyncio.open_connection("127.0.0.1", port)
        honest_w.write(b"GET / HTTP/1.1\r\n")
        flood = []
        for _ in range(100):
            r, w = await asyncio.open_connection("127.0.0.1", port,
                                                 local_addr=("127.77.0.1", 0))
            w.write(b"POST / HTTP/1.1\r\nX-Slow: ")
            flood.append(w)
        await asyncio.sleep(0.2)
        from_flood = [h for h in guard.waiting if guard.source[h] == "127.77.0.1"]
        assert len(from_flood) == 10 and guard.stats.evicted_same_source == 90
        assert list(guard.waiting_from["127.77.0.1"]) == from_flood  # oldest first
        honest_w.write(b"Host: x\r\nConnection: close\r\n\r\n")  # still there
        answer = await asyncio.wait_for(honest_r.read(), 5)
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"hello")
        for w in flood:
            w.close()
        await asyncio.sleep(0.2)
        assert guard.waiting_from == {} and not guard.waiting  # nothing left behind
    finally:
        await stop(runner, server)


def test_every_limit_is_an_option_with_a_flag():
    p = argparse.ArgumentParser()
    add_limit_arguments(p)
    args = p.parse_args(["--http-head-timeout", "5.5", "--http-max-connections", "300",
                         "--http-max-waiting-per-source", "3"])
    words = limit_options(args)
    assert words == {"http-head-timeout": "5.5", "http-max-connections": "300",
                     "http-max-waiting-per-source": "3"}
    limits = limits_from_options(words, "test", trusted=("198.18.0.9",))
    assert (limits.head_timeout_s, limits.max_connections, limits.per_source) == (5.5, 300, 3)
    assert limits.trusted == ("198.18.0.9",) and limits.keepalive_s == 20.0  # the rest default
    assert {f for f, _, _ in LIMIT_OPTIONS.values()} == {
        "head_timeout_s", "body_timeout_s", "keepalive_s", "max_body", "max_waiting",
        "max_waiting_per_source", "max_connections"}  # every field but `trusted`


def test_an_operators_value_wins_over_the_servers_own():
    assert limits_from_options({"http-max-body": "4096"}, "t", max_body=100).max_body == 4096
    assert limits_from_options({}, "t", max_body=100).max_body == 100


@pytest.mark.parametrize("key, bad", [("http-max-connections", "0"),
                                      ("http-max-connections", "2.5"),
                                      ("http-head-timeout", "-1"), ("http-keepalive", "soon"),
                                      ("http-max-body", "")])
def test_a_bad_limit_is_refused_in_one_line_naming_it(key, bad):
    with pytest.raises(ValueError, match=f"^broker: {key} must be a positive") as err:
        limits_from_options({key: bad}, "broker")
    assert "\n" not in str(err.value)


def _record(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:  # noqa: BLE001 - building a record with its traceback
        info = sys.exc_info()
    return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1,
                             "Error handling request from %s", ("198.18.7.7",), info)


def test_parse_errors_and_vanished_clients_become_one_counted_line_a_second():
    lines: list[str] = []
    clock = [100.0]
    quiet = PrivateServerLog(QuietErrors(lines.append, clock=lambda: clock[0]))
    for _ in range(5):
        assert quiet.filter(_record(BadHttpMessage("bad header"))) is False
    assert quiet.filter(_record(ConnectionResetError("Connection lost"))) is False
    assert lines == ["a malformed HTTP request was answered 400 (BadHttpMessage)",
                     "a client went away during its request (ConnectionResetError)"]
    clock[0] += 1.5
    quiet.filter(_record(BadHttpMessage("again")))
    assert lines[-1] == ("a malformed HTTP request was answered 400 (BadHttpMessage) "
                         "(4 more like it suppressed)")
    assert not any("198.18.7.7" in line for line in lines)


def test_any_other_error_keeps_its_traceback_but_not_the_address():
    record = _record(RuntimeError("a bug of ours"))
    assert PrivateServerLog(QuietErrors(lambda line: None)).filter(record) is True
    assert record.getMessage() == "Error handling request" and record.exc_info is not None
    other = logging.LogRecord("aiohttp.server", logging.INFO, __file__, 1, "something else",
                              (), None)
    assert PrivateServerLog().filter(other) is True  # not ours to touch


async def test_a_served_app_logs_no_address_and_no_traceback_for_bad_requests(caplog):
    caplog.set_level(logging.DEBUG)
    guard, runner, server, port = await start(HttpLimits())
    try:
        for bad in (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\n\r\n",
                    b"GET / HTTP/1.1\r\nno colon here\r\n\r\n"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                           local_addr=("127.77.0.2", 0))
            writer.write(bad)
            answer = await asyncio.wait_for(reader.read(), 5)
            status = answer.split(b"\r\n")[0]
            assert status in (b"HTTP/1.0 400 Bad Request", b"HTTP/1.1 400 Bad Request")
            writer.close()
    finally:
        await stop(runner, server)
    assert "127.77.0.2" not in caplog.text and "Traceback" not in caplog.text
    assert "a malformed HTTP request was answered 400" in caplog.text


@pytest.mark.parametrize("bad", ["0", "-1", "1.5", "ten", ""])
def test_a_cap_below_one_or_not_whole_is_refused_naming_the_server(bad):
    from transports.common.httpguard import caps_from_options

    with pytest.raises(ValueError, match=f"^meek server: max-sessions must be a whole number "
                                         f"of at least 1, not '{bad}'$"):
        caps_from_options({"max-sessions": bad}, {"max-sessions": "max_sessions"},
                          "meek server")


def test_caps_given_are_read_and_others_left_to_the_caller():
    from transports.common.httpguard import caps_from_options

    caps = {"max-clients": "max_clients", "max-streams": "max_streams"}
    assert caps_from_options({"max-clients": "1", "cert": "x"}, caps, "bridge") == {
        "max_clients": 1}
    assert caps_from_options({}, caps, "bridge") == {}


def test_both_servers_read_their_caps_through_it():
    from transports.meek.server import config_from_options as meek_config
    from transports.snowflake.server import config_from_options as bridge_config

    cfg, _ = meek_config({"max-sessions": "7", "max-sessions-per-source": "2"})
    assert (cfg.max_sessions, cfg.max_sessions_per_source) == (7, 2)
    with pytest.raises(ValueError, match="^meek server: max-sessions-per-source must"):
        meek_config({"max-sessions-per-source": "0"})
    bridge = bridge_config({"max-clients": "9"})
    assert bridge.max_clients == 9
    with pytest.raises(ValueError, match="^snowflake server: max-streams must"):
        bridge_config({"max-streams": "x"})
