"""The meek server: an HTTP endpoint that turns POSTs into one TCP stream per session.

Behaviour follows Tor's meek-server (docs/transports/meek.md §2):

* every POST (any path) carries ``X-Session-Id``; an unknown id opens one
  upstream connection for the session, with the client address taken from
  ``Meek-IP``, then ``X-Forwarded-For`` (first element), then the peer, but the
  headers count only when the peer is a trusted edge (our addition: Tor's
  server trusts whoever sends them);
* the body (at most 64 KiB) goes upstream, then the server waits for the
  turnaround (10 ms) and answers with what one read of up to 64 KiB returns,
  often nothing, as ``application/octet-stream``;
* requests of one session are served one at a time, in arrival order;
* a session unused for the staleness (120 s) is closed by a sweep every half
  staleness; an upstream that fails or ends gives 500 and ends the session;
* ``GET /`` answers meek-server's decoy text; other GETs 404, other methods 400.

Under hostile load (ours, docs/transports/budgets.md §2): sessions are capped
(``max_sessions``, from the descriptor budget: a session may hold three
descriptors in PT mode, and the polling connections need theirs) and so are
the sessions of one client address (``max_sessions_per_source``); past a cap
the session unused the longest (of that address, for the per-address cap) is
ended. Between polls a session's
upstream is not read, so an idle session buffers nothing in the process, as
meek-server's reads happen only while it answers a request.

What a session can hold is bounded (issue 48, docs/transports/budgets.md
§2.1): its upstream is read through a small receive buffer
(:mod:`transports.common.upstream`; in PT mode, the socket pair to tor's
relay and tor's side too), so :data:`SESSION_BOUND` is the most one session
holds, and the sessions are capped at ``client_buffer`` over that as well as
by descriptors. Expected failures (an upstream that refuses or ends) are
counted, one line a second, never with a client address.

Ids shorter than 8 characters get 400 (meek-server's minimum); so do ids
longer than 128 or with characters outside printable ASCII (ours: they are
never produced by meek or meek_lite and would only cost memory). Bodies over
64 KiB get 413. None of this says "proxy" to a prober: the answers are those
of a small web application.

Timers take an injectable clock, and the sweep is :meth:`MeekServer.expire`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import logging
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from aiohttp import web

from ptcommon.events import EventLog, run_until_stopped
from transports.base import Handoff, Streams
from transports.common import weblisten
from transports.common.budget import (
    CLIENT_BUFFER,
    RESERVE,
    QuietErrors,
    describe_error,
    descriptor_budget,
    raise_nofile_limit,
)
from transports.common.hostport import split_hostport
from transports.common.httpguard import (
    LIMIT_OPTIONS,
    HttpGuard,
    add_limit_arguments,
    caps_from_options,
    limit_options,
    limits_from_options,
)
from transports.common.pipes import spawn, stream_pair
from transports.common.servertls import server_tls
from transports.common.upstream import READ_BUFFER, open_bounded, read_bound
from transports.common.weblisten import Listening
from transports.pt import messages
from transports.pt.messages import format_addr

log = logging.getLogger(__name__)

MAX_PAYLOAD = 0x10000  # 64 KiB, both directions
TURNAROUND_S = 0.010
STALENESS_S = 120.0
MIN_SESSION_ID, MAX_SESSION_ID = 8, 128
DECOY_TEXT = "I\u2019m just a happy little web server.\n"
TRANSPORT_NAME = "meek"

Dial = Callable[[str], Awaitable[Streams]]  # client address "IP:1" -> upstream streams

#: The most one session holds for its client: its upstream's read side; in PT mode
#: also what tor's relay has written towards it (asyncio's 64 KiB write buffer and
#: one read of tor's side, itself bounded); and a poll's body and answer.
SESSION_BOUND = read_bound(READ_BUFFER) + (64 * 1024 + read_bound(READ_BUFFER)) + \
    2 * MAX_PAYLOAD


def default_max_sessions(client_buffer: int = CLIENT_BUFFER) -> int:
    """A sixth of the budget after the reserve, and no more than ``client_buffer``
    over :data:`SESSION_BOUND`. In PT mode a session holds three descriptors (a
    socket pair and tor's connection), and the HTTP connections that poll may
    take the other half (httpguard's cap): 160 sessions at a budget of 1,024,
    where 3,000 would need 9,000 descriptors; 341 at the default client buffer."""
    return max(16, min((descriptor_budget() - RESERVE) // 6, client_buffer // SESSION_BOUND))


@dataclass
class MeekConfig:
    turnaround_s: float = TURNAROUND_S
    staleness_s: float = STALENESS_S
    max_payload: int = MAX_PAYLOAD
    trusted_edges: tuple[str, ...] = ()  # peers whose Meek-IP / X-Forwarded-For count
    max_sessions: int = field(default_factory=default_max_sessions)
    # One address may hold half the sessions: a flood from one place churns its own.
    max_sessions_per_source: int = 0  # 0: half of max_sessions
    # The HTTP limits an operator set (httpguard.LIMIT_OPTIONS words), applied when
    # the server listens, after the descriptor budget is known.
    http_options: dict[str, str] = field(default_factory=dict)

    @property
    def per_source_cap(self) -> int:
        return self.max_sessions_per_source or max(1, self.max_sessions // 2)


@dataclass
class MeekStats:
    sessions: int = 0
    expired: int = 0
    requests: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    rejected: int = 0
    upstream_failures: int = 0
    evicted: int = 0


@dataclass
class Session:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    client_addr: str
    last_seen: float
    source: str = ""  # the client's address, for the per-source cap (never logged)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class BadSessionId(ValueError):
    pass


def check_session_id(value: str | None) -> str:
    """The ``X-Session-Id`` if acceptable; :class:`BadSessionId` says why not."""
    if value is None:
        raise BadSessionId("missing X-Session-Id")
    if len(value) < MIN_SESSION_ID:
        raise BadSessionId("X-Session-Id too short")
    if len(value) > MAX_SESSION_ID or not all("\x21" <= c <= "\x7e" for c in value):
        raise BadSessionId("malformed X-Session-Id")
    return value


def _first_address(header: str | None) -> str | None:
    """The first element of a comma-separated header, if it is an IP address."""
    if not header:
        return None
    first = header.split(",", 1)[0].strip()
    try:
        return str(ipaddress.ip_address(first.strip("[]")))
    except ValueError:
        return None


class MeekServer:
    """The aiohttp application (:attr:`app`); ``dial`` opens each session's upstream."""

    def __init__(self, config: MeekConfig, dial: Dial,
                 clock: Callable[[], float] = time.monotonic,
                 failures: QuietErrors | None = None) -> None:
        self.config = config
        self.dial = dial
        self.clock = clock
        # Expected failures, one line a second each (docs/transports/budgets.md §3).
        self.failures = failures or QuietErrors(log.info, clock=clock)
        self._flusher: asyncio.Task[None] | None = None
        # Least recently used first: the end a full table evicts from.
        self.sessions: collections.OrderedDict[str, Session] = collections.OrderedDict()
        self.stats = MeekStats()
        self._opening: dict[str, asyncio.Future[Session]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.app = web.Application(client_max_size=config.max_payload)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)
        self.app.on_startup.append(self._start_sweeper)
        self.app.on_cleanup.append(self._cleanup)

    # -- lifecycle -----------------------------------------------------------------

    async def _start_sweeper(self, _app: web.Application) -> None:
        self._sweeper = asyncio.create_task(self._sweep_loop())
        self._flusher = asyncio.create_task(self.failures.flush_forever())

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.staleness_s / 2)
            self.expire()

    async def _cleanup(self, _app: web.Application) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for sid in list(self.sessions):
            self._end(sid)
        if self._flusher is not None:
            self._flusher.cancel()
        self.failures.flush(final=True)

    def expire(self) -> int:
        """Close sessions unused for the staleness; return how many."""
        cutoff = self.clock() - self.config.staleness_s
        stale = [sid for sid, s in self.sessions.items()
                 if s.last_seen < cutoff and not s.lock.locked()]
        for sid in stale:
            self._end(sid)
        self.stats.expired += len(stale)
        return len(stale)

    def _end(self, sid: str) -> None:
        session = self.sessions.pop(sid, None)
        if session is not None:
            session.close()

    # -- requests ------------------------------------------------------------------

    def client_ip(self, request: web.Request) -> str:
        peer = request.remote or "0.0.0.0"
        if peer in self.config.trusted_edges:
            for header in ("Meek-IP", "X-Forwarded-For"):
                found = _first_address(request.headers.get(header))
                if found:
                    return found
        return peer

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            if request.path == "/":
                return web.Response(text=DECOY_TEXT, content_type="text/plain")
            return web.Response(status=404, text="404 page not found\n",
                                content_type="text/plain")
        if request.method != "POST":
            self.failures.report("bad-method", "a request that is no POST was answered 400")
            return web.Response(status=400, text="Bad request.\n", content_type="text/plain")
        try:
            sid = check_session_id(request.headers.get("X-Session-Id"))
        except BadSessionId as exc:
            self.stats.rejected += 1
            self.failures.report("bad-session-id", f"a POST was answered 400: {exc}")
            return web.Response(status=400, text="Bad request.\n", content_type="text/plain")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.stats.rejected += 1
            self.failures.report("too-large", "a POST over 64 KiB was answered 413")
            return web.Response(status=413, text="Request Entity Too Large\n",
                                content_type="text/plain")
        self.stats.requests += 1
        try:
            session = await self._session(sid, request)
        except OSError as exc:
            self.stats.upstream_failures += 1
            self.failures.report("upstream-open", "cannot open the upstream for a session: "
                                                  f"{describe_error(exc)}")
            return web.Response(status=500, text="Internal server error.\n",
                                content_type="text/plain")
        if sid in self.sessions:
            self.sessions.move_to_end(sid)  # the most recently used is evicted last
        async with session.lock:
            session.last_seen = self.clock()
            try:
                data = await self._turnaround(session, body)
            except (OSError, EOFError) as exc:
                self.stats.upstream_failures += 1
                self.failures.report("upstream-ended", "a session's upstream ended: "
                                                       f"{describe_error(exc)}")
                if self.sessions.get(sid) is session:
                    self._end(sid)
                return web.Response(status=500, text="Internal server error.\n",
                                    content_type="text/plain")
            session.last_seen = self.clock()
        self.stats.bytes_up += len(body)
        self.stats.bytes_down += len(data)
        return web.Response(body=data, content_type="application/octet-stream")

    async def _session(self, sid: str, request: web.Request) -> Session:
        session = self.sessions.get(sid)
        if session is not None:
            return session
        pending = self._opening.get(sid)
        if pending is not None:  # a concurrent first request of the same session
            return await asyncio.shield(pending)
        fut: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        source = self.client_ip(request)
        self._make_room(source)
        self._opening[sid] = fut
        try:
            addr = format_addr(source, 1)  # port 1: goptlib's stub
            reader, writer = await self.dial(addr)
            session = Session(reader, writer, addr, self.clock(), source)
            self.sessions[sid] = session
            self.stats.sessions += 1
            fut.set_result(session)
            return session
        except BaseException as exc:
            fut.set_exception(exc if isinstance(exc, Exception) else OSError("cancelled"))
            fut.exception()  # retrieved: no "never retrieved" warning
            raise
        finally:
            del self._opening[sid]

    def _make_room(self, source: str) -> None:
        """Before a new session: end the least recently used idle one of ``source``
        when it holds its share, else the least recently used of all when the table
        is full."""
        mine = [sid for sid, s in self.sessions.items() if s.source == source]
        if len(mine) >= self.config.per_source_cap:
            self._evict(mine)
        if len(self.sessions) + len(self._opening) >= self.config.max_sessions:
            self._evict(list(self.sessions))

    def _evict(self, candidates: list[str]) -> None:
        for sid in candidates:  # oldest use first
            if not self.sessions[sid].lock.locked():
                self._end(sid)
                self.stats.evicted += 1
                return

    async def _turnaround(self, session: Session, body: bytes) -> bytes:
        # The upstream is a connection, whose transport reads as well as writes (a
        # cast, not isinstance: uvloop's transports are no asyncio.Transport).
        transport = cast(asyncio.Transport, session.writer.transport)
        transport.resume_reading()  # see the module docstring: no read-ahead between polls
        try:
            if body:
                session.writer.write(body)
                await session.writer.drain()
            try:
                data = await asyncio.wait_for(session.reader.read(self.config.max_payload),
                                              self.config.turnaround_s)
            except TimeoutError:
                return b""
            if not data:
                raise EOFError("upstream closed")
            return data
        finally:
            if not transport.is_closing():
                transport.pause_reading()


# -- PT server mode and the lab's standalone mode ---------------------------------------------

def dial_tcp(host: str, port: int) -> Dial:
    """A dial function for a fixed destination (the lab's bridges relay to the web
    node), read through a small buffer (SESSION_BOUND)."""
    async def dial(_client_addr: str) -> Streams:
        return await open_bounded(host, port, READ_BUFFER)
    return dial


def dial_through_handoff(handoff: Handoff) -> Dial:
    """A dial function that hands one end of a socket pair to ``handoff`` (managed
    mode's relay to tor's Extended ORPort) and keeps the other for the session;
    the pair's buffers are small, as a bounded upstream's (SESSION_BOUND)."""
    async def dial(client_addr: str) -> Streams:
        session_end, inner = await stream_pair(READ_BUFFER // 2, READ_BUFFER // 2,
                                               kernel_buffer=READ_BUFFER)
        spawn(handoff(inner, client_addr))
        return session_end
    return dial


async def listen(server: MeekServer, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None) -> Listening:
    # The edge carries everyone's polls: it gets no per-address share of the
    # connections that wait for a request head.
    guard = HttpGuard(limits_from_options(server.config.http_options, "meek server",
                                          trusted=server.config.trusted_edges))
    guard.failures = server.failures
    return await weblisten.listen(server.app, host, port, ssl_context, guard)


#: The server's caps an operator may set: option word -> MeekConfig field.
CAP_OPTIONS = {"max-sessions": "max_sessions", "max-sessions-per-source": "max_sessions_per_source",
               "client-buffer": "client_buffer"}


def config_from_options(options: dict[str, str]) -> tuple[MeekConfig, ssl.SSLContext | None]:
    """Server options (``TOR_PT_SERVER_TRANSPORT_OPTIONS`` or the CLI): ``cert``/``key``
    (without them, plain HTTP behind a CDN, like ``--disable-tls``), ``turnaround-ms``,
    ``staleness`` (seconds), ``trusted-edge`` (comma-separated addresses), the
    caps ``max-sessions`` and ``max-sessions-per-source``, and the HTTP limits
    (``http-head-timeout``, ``http-max-connections``, ...: httpguard.LIMIT_OPTIONS)."""
    known = {"cert", "key", "turnaround-ms", "staleness", "trusted-edge", *CAP_OPTIONS,
             *LIMIT_OPTIONS}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"meek server: unknown option {unknown[0]!r} "
                         f"(known: {', '.join(sorted(known))})")
    try:
        turnaround = float(options.get("turnaround-ms", TURNAROUND_S * 1000)) / 1000
        staleness = float(options.get("staleness", STALENESS_S))
    except ValueError:
        raise ValueError("meek server: turnaround-ms and staleness must be numbers") from None
    if not 0 <= turnaround <= 10 or not 0 < staleness:
        raise ValueError("meek server: turnaround-ms must be 0-10000 and staleness > 0")
    edges = []
    for item in filter(None, (x.strip() for x in options.get("trusted-edge", "").split(","))):
        try:
            edges.append(str(ipaddress.ip_address(item)))
        except ValueError:
            raise ValueError(f"meek server: trusted-edge {item!r} is not an address") from None
    cfg = MeekConfig(turnaround_s=turnaround, staleness_s=staleness, trusted_edges=tuple(edges))
    caps = caps_from_options(options, CAP_OPTIONS, "meek server")
    client_buffer = caps.pop("client_buffer", CLIENT_BUFFER)
    if client_buffer < SESSION_BOUND:
        raise ValueError(f"meek server: client-buffer must be at least {SESSION_BOUND} bytes")
    cfg.max_sessions = default_max_sessions(client_buffer)
    for attr, value in caps.items():
        setattr(cfg, attr, value)
    cfg.http_options = {k: v for k, v in options.items() if k in LIMIT_OPTIONS}
    limits_from_options(cfg.http_options, "meek server")  # refuse a bad value now
    return cfg, server_tls(options.get("cert"), options.get("key"), "meek server")


class MeekServerFactory:
    """PT server mode: the meek server listens itself and hands each session to tor.
    Its failures are tor's ``LOG`` lines, at info level, one a second each."""

    #: managed mode reads tor's side of each session through a buffer this small
    #: (transports/common/upstream.py), as SESSION_BOUND counts.
    upstream_read_buffer = READ_BUFFER

    def __init__(self, config: MeekConfig, ssl_context: ssl.SSLContext | None = None) -> None:
        self.config, self.ssl_context = config, ssl_context

    def smethod_args(self) -> dict[str, str]:
        return {}

    async def listen(self, host: str, port: int, handoff: Handoff) -> Listening:
        failures = QuietErrors(lambda line: messages.log("info", f"meek: {line}"))
        return await listen(MeekServer(self.config, dial_through_handoff(handoff),
                                       failures=failures), host, port, self.ssl_context)



async def _serve_forever(listen_addr: tuple[str, int], dest: tuple[str, int],
                         cfg: MeekConfig, tls: ssl.SSLContext | None,
                         stop: asyncio.Event) -> int:
    events = EventLog("meek-server")
    # asyncio's own reports (a failed accept() when descriptors run out) and the
    # server's expected failures: one line a second each, never a traceback.
    failures = QuietErrors(lambda line: events.emit("failures", message=line))
    failures.install(asyncio.get_running_loop())
    server = MeekServer(cfg, dial_tcp(*dest), failures=failures)
    try:
        listening = await listen(server, *listen_addr, tls)
    except OSError as exc:
        print(f"meek server: cannot listen on {listen_addr}: {exc}", file=sys.stderr)
        return 1
    events.ready(listen=f"{listening.host}:{listening.port}", tls=tls is not None,
                 max_sessions=cfg.max_sessions)
    await stop.wait()
    await listening.aclose()
    events.emit("stats", **vars(server.stats))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m transports.meek.server --listen H:P --dest H:P``: a meek server
    outside tor that connects every session to one destination (the lab's mode)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m transports.meek.server",
                                description=(main.__doc__ or "").partition("\n")[0])
    p.add_argument("--listen", required=True, help="HOST:PORT for the HTTP(S) server")
    p.add_argument("--dest", required=True, help="HOST:PORT each session connects to")
    p.add_argument("--cert", help="TLS certificate (PEM); without it, plain HTTP (behind a CDN)")
    p.add_argument("--key", help="TLS private key (PEM)")
    p.add_argument("--turnaround-ms", default=str(TURNAROUND_S * 1000))
    p.add_argument("--staleness", default=str(STALENESS_S), help="seconds")
    p.add_argument("--trusted-edge", action="append", default=[],
                   help="address of a front whose Meek-IP / X-Forwarded-For count")
    p.add_argument("--max-sessions", help="sessions in all (default: from the budget)")
    p.add_argument("--max-sessions-per-source", help="sessions one address may hold")
    p.add_argument("--client-buffer", help="bytes all sessions may hold for clients "
                   f"(default {CLIENT_BUFFER}); caps the sessions at it over {SESSION_BOUND}")
    add_limit_arguments(p)
    args = p.parse_args(argv)
    options = {"turnaround-ms": args.turnaround_ms, "staleness": args.staleness,
               "trusted-edge": ",".join(args.trusted_edge), **limit_options(args)}
    for key in CAP_OPTIONS:
        if getattr(args, key.replace("-", "_")) is not None:
            options[key] = getattr(args, key.replace("-", "_"))
    if args.cert or args.key:
        options.update(cert=args.cert or "", key=args.key or "")
    try:
        raise_nofile_limit()  # before the caps are derived from the budget
        cfg, tls = config_from_options(options)
        listen_addr, dest = split_hostport(args.listen), split_hostport(args.dest)
    except (ValueError, OSError, ssl.SSLError) as exc:
        p.error(str(exc))
    return run_until_stopped("meek-server",
                             lambda stop: _serve_forever(listen_addr, dest, cfg, tls, stop))


if __name__ == "__main__":
    raise SystemExit(main())
