"""Our meek server on loopback: meek-server's HTTP behaviour, sessions and their expiry,
limits and bad input."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transports.meek import server as meekserver
from transports.meek.server import (
    DECOY_TEXT,
    MAX_PAYLOAD,
    MeekConfig,
    MeekServer,
    check_session_id,
)


class Upstream:
    """An echo server; ``dialed`` records the client address each session was opened with."""

    def __init__(self) -> None:
        self.dialed: list[str] = []
        self.connections = 0
        self.closed = 0

    async def dial(self, client_addr: str):
        self.dialed.append(client_addr)
        self.connections += 1
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def start(self) -> Upstream:
        async def echo(reader, writer):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            self.closed += 1
            writer.close()

        self.server = await asyncio.start_server(echo, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def meek(config: MeekConfig | None = None, clock=None):
    up = await Upstream().start()
    server = MeekServer(config or MeekConfig(turnaround_s=0.05), up.dial,
                        **({"clock": clock} if clock else {}))
    ts = TestServer(server.app, host="127.0.0.1")
    await ts.start_server()
    return ts, server, up


async def post(http, ts, sid, body=b"", headers=None):
    h = {"X-Session-Id": sid} if sid is not None else {}
    h.update(headers or {})
    async with http.post(ts.make_url("/"), data=body, headers=h) as r:
        return r.status, await r.read(), r.headers.get("Content-Type")


async def test_a_session_round_trips_bytes_and_keeps_one_upstream():
    ts, server, up = await meek()
    try:
        async with aiohttp.ClientSession() as http:
            status, data, ctype = await post(http, ts, "abcdefgh12", b"hello")
            assert (status, data, ctype) == (200, b"hello", "application/octet-stream")
            status, data, _ = await post(http, ts, "abcdefgh12")  # an empty poll
            assert (status, data) == (200, b"")
            await post(http, ts, "abcdefgh12", b"again")
            await post(http, ts, "other-session-1", b"x")
        assert up.connections == 2 and server.stats.sessions == 2
    finally:
        await ts.close()


async def test_decoy_and_other_methods():
    ts, _, up = await meek()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(ts.make_url("/")) as r:
                assert r.status == 200 and await r.text() == DECOY_TEXT
            async with http.get(ts.make_url("/admin")) as r:
                assert r.status == 404
            async with http.put(ts.make_url("/"), data=b"x",
                                headers={"X-Session-Id": "abcdefgh"}) as r:
                assert r.status == 400
        assert up.connections == 0
    finally:
        await ts.close()


@pytest.mark.parametrize("sid", [None, "", "short", "x" * 129, "has space1", "caf\u00e9-caf\u00e9"])
async def test_missing_or_malformed_session_ids_get_400_and_no_upstream(sid):
    ts, server, up = await meek()
    try:
        async with aiohttp.ClientSession() as http:
            status, _, _ = await post(http, ts, sid, b"data")
            assert status == 400
            status, data, _ = await post(http, ts, "fine-session", b"still up")
            assert (status, data) == (200, b"still up")
        assert up.connections == 1 and server.stats.rejected == 1
    finally:
        await ts.close()


async def test_bodies_over_64_kib_get_413_and_64_kib_passes():
    ts, _, up = await meek(MeekConfig(turnaround_s=0.2))
    try:
        async with aiohttp.ClientSession() as http:
            status, _, _ = await post(http, ts, "big-session", b"x" * (MAX_PAYLOAD + 1))
            assert status == 413
            status, data, _ = await post(http, ts, "big-session", b"y" * MAX_PAYLOAD)
            assert status == 200 and 0 < len(data) <= MAX_PAYLOAD
    finally:
        await ts.close()


async def test_sessions_expire_after_the_staleness():
    clock = Clock()
    ts, server, up = await meek(MeekConfig(turnaround_s=0.05, staleness_s=120), clock)
    try:
        async with aiohttp.ClientSession() as http:
            await post(http, ts, "session-old", b"a")
            clock.now += 100
            await post(http, ts, "session-new", b"b")
            clock.now += 21
            assert server.expire() == 1
            assert set(server.sessions) == {"session-new"}
            for _ in range(50):
                if up.closed:
                    break
                await asyncio.sleep(0.01)
            assert up.closed == 1  # the old session's upstream was closed
            await post(http, ts, "session-old", b"c")  # a new session under the old id
        assert up.connections == 3
    finally:
        await ts.close()


async def test_the_client_address_comes_from_the_edge_only():
    ts, _, up = await meek(MeekConfig(turnaround_s=0.01, trusted_edges=("127.0.0.1",)))
    try:
        async with aiohttp.ClientSession() as http:
            await post(http, ts, "session-aaa", b"", {"Meek-IP": "198.18.0.7, 10.0.0.1"})
            await post(http, ts, "session-bbb", b"", {"X-Forwarded-For": "2001:db8::5"})
            await post(http, ts, "session-ccc", b"", {"X-Forwarded-For": "not an address"})
    finally:
        await ts.close()
    ts, _, up2 = await meek(MeekConfig(turnaround_s=0.01))
    try:
        async with aiohttp.ClientSession() as http:
            await post(http, ts, "session-ddd", b"", {"Meek-IP": "198.18.0.7"})
    finally:
        await ts.close()
    assert up.dialed == ["198.18.0.7:1", "[2001:db8::5]:1", "127.0.0.1:1"]
    assert up2.dialed == ["127.0.0.1:1"]  # not an edge: the header does not count


async def test_an_upstream_that_closes_gives_500_and_ends_the_session():
    async def closing_dial(_addr):
        async def hang_up(reader, writer):
            writer.close()
        srv = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        return await asyncio.open_connection(*srv.sockets[0].getsockname()[:2])

    server = MeekServer(MeekConfig(turnaround_s=0.2), closing_dial)
    ts = TestServer(server.app, host="127.0.0.1")
    await ts.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            status, _, _ = await post(http, ts, "doomed-session", b"x")
            assert status == 500
        assert not server.sessions
    finally:
        await ts.close()


def test_session_id_rules():
    assert check_session_id("abcdefgh") == "abcdefgh"
    assert check_session_id("0" * 32) == "0" * 32


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH"]),
       path=st.text(alphabet="abc/%?=&", max_size=20),
       sid=st.one_of(st.none(), st.text(alphabet=st.characters(min_codepoint=32,
                                                                max_codepoint=126), max_size=40)),
       body=st.binary(max_size=2000))
def test_fuzzed_requests_never_break_the_server(method, path, sid, body):
    async def one() -> None:
        ts, _, _ = await meek(MeekConfig(turnaround_s=0.001))
        try:
            async with aiohttp.ClientSession() as http:
                headers = {"X-Session-Id": sid} if sid is not None else {}
                async with http.request(method, ts.make_url("/" + path.lstrip("/")),
                                        data=body, headers=headers) as r:
                    assert r.status in (200, 400, 404), r.status
                async with http.get(ts.make_url("/")) as r:
                    assert r.status == 200
        finally:
            await ts.close()

    asyncio.run(one())


async def test_past_the_session_cap_the_least_recently_used_session_is_ended():
    ts, server, up = await meek(MeekConfig(turnaround_s=0.01, max_sessions=3,
                                           max_sessions_per_source=3))
    try:
        async with aiohttp.ClientSession() as http:
            for sid in ("session-1", "session-2", "session-3"):
                await post(http, ts, sid, b"x")
            await post(http, ts, "session-1", b"y")  # session-1 is now the most recent
            assert (await post(http, ts, "session-4", b"z"))[:2] == (200, b"z")
            assert list(server.sessions) == ["session-3", "session-1", "session-4"]
            assert server.stats.evicted == 1
            # The one still in use carries on.
            assert (await post(http, ts, "session-1", b"again"))[:2] == (200, b"again")
        await asyncio.sleep(0.1)
        assert up.closed == 1  # session-2's upstream was closed
    finally:
        await ts.close()


async def test_one_address_holds_at_most_its_share_and_churns_its_own_sessions():
    cfg = MeekConfig(turnaround_s=0.01, max_sessions=10, trusted_edges=("127.0.0.1",))
    assert cfg.per_source_cap == 5
    ts, server, _ = await meek(cfg)
    try:
        async with aiohttp.ClientSession() as http:
            await post(http, ts, "victim-01", b"v", {"Meek-IP": "198.18.0.2"})
            for i in range(20):  # a flood from one address
                await post(http, ts, f"flood-{i:04}", b"", {"Meek-IP": "198.18.0.66"})
            flooders = [s for s in server.sessions.values() if s.source == "198.18.0.66"]
            assert len(flooders) == 5 and "victim-01" in server.sessions
            assert (await post(http, ts, "victim-01", b"w",
                               {"Meek-IP": "198.18.0.2"}))[:2] == (200, b"w")
    finally:
        await ts.close()


async def test_between_polls_a_session_reads_nothing_from_its_upstream():
    """Tor's meek-server reads the upstream only while it answers a request: an idle
    session holds no buffer in the process."""
    ts, server, _ = await meek(MeekConfig(turnaround_s=0.01))
    try:
        async with aiohttp.ClientSession() as http:
            got = (await post(http, ts, "quiet-session", b"x" * 1000))[1]
            session = server.sessions["quiet-session"]
            for _ in range(50):
                # The echo's answer waits in the kernel between polls, not in our buffer.
                await asyncio.sleep(0.02)
                assert len(session.reader._buffer) == 0  # noqa: SLF001 - the point here
                if len(got) == 1000:
                    break
                got += (await post(http, ts, "quiet-session"))[1]
            assert got == b"x" * 1000  # and the polls still carry all of it
    finally:
        await ts.close()


def test_the_caps_are_options():
    from transports.meek.server import config_from_options

    cfg, _ = config_from_options({"max-sessions": "40", "max-sessions-per-source": "4"})
    assert (cfg.max_sessions, cfg.per_source_cap) == (40, 4)
    for bad in ("0", "x"):
        with pytest.raises(ValueError, match="max-sessions"):
            config_from_options({"max-sessions": bad})


def test_the_client_buffer_caps_the_sessions_at_its_bound_each(monkeypatch):
    """What a session holds is bounded (SESSION_BOUND), so a memory budget is a cap
    on sessions too, below the descriptors' when those are many (issue 48)."""
    from transports.meek.server import SESSION_BOUND, config_from_options

    monkeypatch.setattr(meekserver, "descriptor_budget", lambda: 65536)
    bound = 100 * SESSION_BOUND
    cfg, _ = config_from_options({"client-buffer": str(bound)})
    assert cfg.max_sessions == 100
    cfg, _ = config_from_options({"client-buffer": str(bound - 1)})  # across it: one fewer
    assert cfg.max_sessions == 99
    cfg, _ = config_from_options({"client-buffer": str(bound), "max-sessions": "500"})
    assert cfg.max_sessions == 500  # the operator's own cap wins
    monkeypatch.setattr(meekserver, "descriptor_budget", lambda: 1024)
    cfg, _ = config_from_options({})
    assert cfg.max_sessions == (1024 - 64) // 6  # 160: the descriptors bind at 1,024
    with pytest.raises(ValueError, match="^meek server: client-buffer must be at least"):
        config_from_options({"client-buffer": str(SESSION_BOUND - 1)})


async def test_the_http_limits_are_options_that_reach_the_listener():
    from transports.meek.server import MeekServer, config_from_options, listen

    cfg, _ = config_from_options({"http-max-connections": "77", "http-head-timeout": "3",
                                  "trusted-edge": "198.18.0.40"})
    up = Upstream()
    await up.start()
    listening = await listen(MeekServer(cfg, up.dial), "127.0.0.1", 0)
    try:
        limits = listening.guard.limits
        assert (limits.max_connections, limits.head_timeout_s) == (77, 3.0)
        assert limits.trusted == ("198.18.0.40",)  # the edge has no per-address share
    finally:
        await listening.aclose()
        up.server.close()
    with pytest.raises(ValueError, match="^meek server: http-head-timeout must be a positive"):
        config_from_options({"http-head-timeout": "0"})


def test_the_command_line_takes_every_cap(capsys):
    from transports.meek.server import main

    with pytest.raises(SystemExit) as exit_:
        main(["--listen", "127.0.0.1:0", "--dest", "127.0.0.1:9", "--max-sessions", "5",
              "--http-max-waiting", "none"])
    assert exit_.value.code == 2
    assert "http-max-waiting must be a positive whole number" in capsys.readouterr().err
