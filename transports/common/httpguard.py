"""HTTP servers that shed the slow and the idle (docs/transports/budgets.md §2).

aiohttp, as our meek server, Snowflake bridge and broker use it, has no deadline
for a request's head, keeps an idle connection for 75 s, takes any number of
connections, and leaves a huge ``Content-Length`` to the handler. So 1,500
slowloris connections (heads never finished) take every descriptor a server
has. :class:`HttpGuard` sits between the listening socket and aiohttp:

* a connection must finish each request head within ``head_timeout_s`` (20 s,
  Tor's meek-server's read timeout), counted from its accept or from the end
  of its previous response;
* connections waiting for a head are capped (from the descriptor budget); past
  the cap the one that has waited longest is closed, so a new client gets in;
* one address may hold a quarter of the waiting places; past its share, its
  own longest-waiting connection is closed, so a flood from one address churns
  its own connections and nobody else's. A trusted edge (a CDN or reverse proxy
  whose connections carry everyone's requests) has no share;
* connections in all are capped, below the budget; when the cap is reached
  and none is waiting, an application may name one of its long-running
  connections to close (:attr:`HttpGuard.shed`: the Snowflake bridge closes
  the WebSocket that has been silent longest), else the newcomer is refused;
* a body must have arrived within ``body_timeout_s`` of its head (or the
  connection is closed), and one whose declared length is over ``max_body``
  is answered 413 before a byte of it is read;
* an idle kept-alive connection is closed after ``keepalive_s``.

A request being served (a meek poll, a broker long-poll, a WebSocket) is not
waiting, whatever it takes. Nothing here logs a client address, and neither
does aiohttp once :func:`serve` has run: its "Error handling request from
<address>" loses the address, and for a request that does not parse (a
probe's, a fuzzer's) it becomes one quiet line a second with a count
(:class:`PrivateServerLog`), never a traceback.

Every limit can be set by its operator: :data:`LIMIT_OPTIONS` names them
(``http-head-timeout``, ``http-max-connections``, ...), the same words as
command-line flags (:func:`add_limit_arguments`) and as PT server options
(``TOR_PT_SERVER_TRANSPORT_OPTIONS``), read by :func:`limits_from_options`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .budget import RESERVE, QuietErrors, descriptor_budget, unauthenticated_cap

log = logging.getLogger(__name__)

HEAD_TIMEOUT_S = 20.0  # Tor's meek-server: ReadTimeout 20 s (and IdleTimeout follows it)
BODY_TIMEOUT_S = 20.0
KEEPALIVE_S = 20.0


def default_max_connections() -> int:
    """Half the budget after the reserve: a relayed connection may need a second
    descriptor upstream."""
    return max(32, (descriptor_budget() - RESERVE) // 2)


@dataclass
class HttpLimits:
    head_timeout_s: float = HEAD_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    keepalive_s: float = KEEPALIVE_S
    max_body: int = 1 << 20
    max_waiting: int = field(default_factory=unauthenticated_cap)
    max_connections: int = field(default_factory=default_max_connections)
    max_waiting_per_source: int = 0  # 0: a quarter of max_waiting, at least 4
    trusted: tuple[str, ...] = ()  # addresses with no per-source share (the edge)

    @property
    def per_source(self) -> int:
        return self.max_waiting_per_source or max(4, self.max_waiting // 4)


#: Operator-settable limits: option word -> (HttpLimits field, type, what it is).
LIMIT_OPTIONS: dict[str, tuple[str, type, str]] = {
    "http-head-timeout": ("head_timeout_s", float,
                          f"seconds a connection has to send a request head ({HEAD_TIMEOUT_S:g})"),
    "http-body-timeout": ("body_timeout_s", float,
                          f"seconds a request has for its body ({BODY_TIMEOUT_S:g})"),
    "http-keepalive": ("keepalive_s", float,
                       f"seconds an idle kept-alive connection stays open ({KEEPALIVE_S:g})"),
    "http-max-body": ("max_body", int, "largest request body in bytes; larger is 413"),
    "http-max-waiting": ("max_waiting", int,
                         "connections waiting for a head (default: from the descriptor budget)"),
    "http-max-waiting-per-source": ("max_waiting_per_source", int,
                                    "waiting places one address may hold (default: a quarter)"),
    "http-max-connections": ("max_connections", int,
                             "connections in all (default: half the descriptor budget)"),
}


def limits_from_options(options: Mapping[str, str], who: str, **fixed: Any) -> HttpLimits:
    """The limits named in ``options`` (any of :data:`LIMIT_OPTIONS`; other keys are
    the caller's) over ``fixed`` and the defaults. ValueError, in one line naming
    ``who`` and the option, for a value that is not a positive number."""
    values = dict(fixed)
    for key, (attr, kind, _) in LIMIT_OPTIONS.items():
        raw = options.get(key)
        if raw is None:
            continue
        try:
            value = kind(raw)
        except (TypeError, ValueError):
            value = 0
        if not value > 0:
            noun = "whole number" if kind is int else "number"
            raise ValueError(f"{who}: {key} must be a positive {noun}, not {raw!r}")
        values[attr] = value
    return HttpLimits(**values)


def caps_from_options(options: Mapping[str, Any], caps: Mapping[str, str],
                      who: str) -> dict[str, int]:
    """{field: value} for each cap of ``caps`` (option word -> config field) that
    ``options`` sets. A server's connection and session caps are whole numbers of
    at least 1; anything else is a ValueError in one line naming ``who``."""
    out = {}
    for key, attr in caps.items():
        if key in options:
            value = str(options[key])
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"{who}: {key} must be a whole number of at least 1, "
                                 f"not {value!r}")
            out[attr] = int(value)
    return out


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """``--http-head-timeout`` and the rest, one flag per :data:`LIMIT_OPTIONS` word."""
    group = parser.add_argument_group("HTTP limits (docs/transports/budgets.md)")
    for key, (_, _, what) in LIMIT_OPTIONS.items():
        group.add_argument(f"--{key}", metavar="N", help=what)


def limit_options(args: argparse.Namespace) -> dict[str, str]:
    """The :data:`LIMIT_OPTIONS` given on a command line, as option words."""
    out = {}
    for key in LIMIT_OPTIONS:
        value = getattr(args, key.replace("-", "_"), None)
        if value is not None:
            out[key] = str(value)
    return out


@dataclass
class GuardStats:
    head_timeouts: int = 0
    evicted: int = 0
    evicted_same_source: int = 0
    refused: int = 0
    shed: int = 0
    too_large: int = 0
    body_timeouts: int = 0


class HttpGuard:
    """Deadlines and caps for one aiohttp server's connections."""

    def __init__(self, limits: HttpLimits | None = None) -> None:
        self.limits = limits or HttpLimits()
        self.stats = GuardStats()
        self.open: set[Any] = set()
        self.source: dict[Any, str] = {}  # handler -> its peer's address
        # handler -> the timer that closes it unless a request head arrives first
        self.waiting: collections.OrderedDict[Any, asyncio.TimerHandle] = \
            collections.OrderedDict()
        # address -> its waiting handlers, longest-waiting first (so an accept
        # costs the same however many connections wait)
        self.waiting_from: dict[str, dict[Any, None]] = {}
        # At the connection cap with none waiting: closes one of the application's
        # long-running connections to make room, and says whether it did.
        self.shed: Callable[[], bool] | None = None
        # Where aiohttp's expected errors are counted (PrivateServerLog): the
        # server's own failure lines; Python's logging at info level if None.
        self.failures: QuietErrors | None = None

    # --- connections ------------------------------------------------------------

    def factory(self, make_handler: Callable[[], Any]) -> Callable[[], asyncio.Protocol]:
        """Wrap aiohttp's protocol factory (``runner.server``)."""
        return lambda: _Watched(make_handler(), self)

    def _admit(self, handler: Any, transport: asyncio.BaseTransport) -> None:
        if len(self.open) >= self.limits.max_connections and not self.waiting:
            if self.shed is None or not self.shed():
                self.stats.refused += 1
                transport.close()
                return
            self.stats.shed += 1  # it leaves self.open once its close has run
        peer = transport.get_extra_info("peername")
        src = str(peer[0]) if peer else ""
        mine = self.waiting_from.get(src, {}) if src not in self.limits.trusted else {}
        if len(mine) >= self.limits.per_source:
            self._evict(next(iter(mine)))  # its own longest-waiting connection
            self.stats.evicted_same_source += 1
        elif self.waiting and (len(self.open) >= self.limits.max_connections or
                               len(self.waiting) >= self.limits.max_waiting):
            self._evict(next(iter(self.waiting)))
        self.open.add(handler)
        self.source[handler] = src
        self._wait(handler)

    def _evict(self, handler: Any) -> None:
        self._stop_waiting(handler)
        self.stats.evicted += 1
        _close(handler)

    def _wait(self, handler: Any) -> None:
        """Start ``handler``'s head deadline (on accept, and after each response)."""
        self._stop_waiting(handler)
        if handler not in self.open:
            return
        loop = asyncio.get_running_loop()
        self.waiting[handler] = loop.call_later(self.limits.head_timeout_s, self._expire,
                                                handler)
        src = self.source.get(handler)
        if src:
            self.waiting_from.setdefault(src, {})[handler] = None

    def _stop_waiting(self, handler: Any) -> bool:
        """Take ``handler`` off the waiting lists; whether it was on them."""
        timer = self.waiting.pop(handler, None)
        if timer is None:
            return False
        timer.cancel()
        src = self.source.get(handler)
        mine = self.waiting_from.get(src) if src else None
        if src and mine is not None:
            mine.pop(handler, None)
            if not mine:
                del self.waiting_from[src]
        return True

    def _expire(self, handler: Any) -> None:
        if self._stop_waiting(handler):
            self.stats.head_timeouts += 1
            _close(handler)

    def _body_late(self, request: web.Request) -> None:
        if not request.content.is_eof():
            self.stats.body_timeouts += 1
            _close(request.protocol)

    def _forget(self, handler: Any) -> None:
        self._stop_waiting(handler)
        self.open.discard(handler)
        self.source.pop(handler, None)

    # --- requests -------------------------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                         ) -> web.StreamResponse:
        proto = request.protocol
        self._stop_waiting(proto)  # a head arrived: serving now, however long it takes
        try:
            length = request.content_length
            if length is not None and length > self.limits.max_body:
                self.stats.too_large += 1
                raise web.HTTPRequestEntityTooLarge(max_size=self.limits.max_body,
                                                    actual_size=length,
                                                    headers={"Connection": "close"})
            body_deadline = None
            if request.body_exists:
                # Whoever reads it, the whole body must have arrived by the deadline.
                body_deadline = asyncio.get_running_loop().call_later(
                    self.limits.body_timeout_s, self._body_late, request)
            try:
                return await handler(request)
            finally:
                if body_deadline is not None:
                    body_deadline.cancel()
        finally:
            if proto in self.open:
                self._wait(proto)  # the next head (keep-alive) has its own deadline


class _Watched(asyncio.Protocol):
    """aiohttp's handler for one connection, with the guard told when it starts and
    ends (aiohttp's handler has ``__slots__``: it cannot be given hooks itself)."""

    def __init__(self, handler: Any, guard: HttpGuard) -> None:
        self.handler, self.guard = handler, guard

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.handler.connection_made(transport)
        self.guard._admit(self.handler, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard._forget(self.handler)
        self.handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()


def _close(handler: Any) -> None:
    transport = getattr(handler, "transport", None)
    if transport is not None:
        transport.close()


class PrivateServerLog(logging.Filter):
    """A filter for aiohttp's server log. Its "Error handling request from %s" names
    the client and, for a request that does not parse, carries a traceback: a
    fuzzer's 300 requests made 138 tracebacks and 73 KB of log in the broker's.
    A parse error (``HttpProcessingError``: answered 400 by aiohttp) and a client
    gone while its request was answered (``ConnectionError``: a WebSocket upgrade
    reset before the 101 was written) are expected on the open internet: each
    becomes one line per second with a count of the rest. Any other error keeps
    its traceback, since it is ours to fix, but loses the address."""

    PREFIX = "Error handling request"

    def __init__(self, quiet: QuietErrors | None = None) -> None:
        super().__init__()
        self.quiet = quiet or QuietErrors(log.info)

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str) or not record.msg.startswith(self.PREFIX):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            self.quiet.report("bad-http", f"a malformed HTTP request was answered "
                                          f"{exc.code} ({type(exc).__name__})")
            return False
        if isinstance(exc, ConnectionError):
            self.quiet.report("gone", f"a client went away during its request "
                                      f"({type(exc).__name__})")
            return False
        record.msg, record.args = self.PREFIX, ()
        return True


def keep_server_log_private(logger: logging.Logger | None = None,
                            quiet: QuietErrors | None = None) -> None:
    """Install :class:`PrivateServerLog` on aiohttp's server logger, once; with
    ``quiet``, its lines go there (one process serves one such server, or the last
    one listening gets them)."""
    logger = logger or logging.getLogger("aiohttp.server")
    for f in logger.filters:
        if isinstance(f, PrivateServerLog):
            if quiet is not None:
                f.quiet = quiet
            return
    logger.addFilter(PrivateServerLog(quiet))


async def serve(app: web.Application, host: str | None, port: int,
                ssl_context: ssl.SSLContext | None = None,
                guard: HttpGuard | None = None) -> tuple[web.AppRunner, asyncio.Server]:
    """Run ``app`` behind ``guard``: the runner and the listening server, both to be
    closed (the server first)."""
    guard = guard or HttpGuard()
    keep_server_log_private(quiet=guard.failures)
    app.middlewares.insert(0, guard.middleware)  # before anything else the app does
    runner = web.AppRunner(app, access_log=None, handle_signals=False,
                           keepalive_timeout=guard.limits.keepalive_s)
    await runner.setup()
    assert runner.server is not None  # setup() made it
    loop = asyncio.get_running_loop()
    try:
        server = await loop.create_server(guard.factory(runner.server), host, port,
                                          ssl=ssl_context, backlog=128)
    except BaseException:
        await runner.cleanup()
        raise
    return runner, server
