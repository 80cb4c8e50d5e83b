"""The Snowflake bridge: WebSocket in, Turbo Tunnel, and each smux stream out to
a destination or to tor (docs/transports/snowflake.md §5; docs/transports/turbotunnel.md §2, §6).

A proxy opens a WebSocket (any path, ``?client_ip=`` optional) and relays the
data channel's bytes into it. The bridge reads the 8-byte token and 8-byte
ClientID from the byte stream, then decapsulates KCP packets, one batch per
WebSocket message, into the ClientID's session (:mod:`.turbotunnel.clientmap`).
Downstream, packets from the ClientID's queue are encapsulated and sent as
binary messages of at most ``MAX_MESSAGE`` bytes.

Silence before the token is normal (proxies open spare connections) and ends
quietly; a wrong token closes the WebSocket. A plain HTTP request gets 400,
as Go's WebSocket upgrader answers. Streams go to ``dest`` with a plain TCP
connection, to tor's ORPort, or to its Extended ORPort with ``USERADDR`` set to
the client address the proxy reported (port 1, a stub, as goptlib does) and
``TRANSPORT=snowflake``.

Under hostile load (ours, docs/transports/budgets.md §2): the HTTP side sheds
slow and idle connections (:mod:`transports.common.httpguard`), the ClientID
map is capped, and so are open streams, in all (``max_streams``, from the
descriptor budget: each holds an upstream connection) and per ClientID
(``max_streams_per_client``; tor opens one); a stream over a cap is closed at
once. At the connection cap with no connection waiting for its head, the
WebSocket that has been silent longest is closed for a newcomer (its session
lives on, as after a proxy change).

What the bridge holds for clients is budgeted (``client_buffer``, issue 48,
docs/transports/budgets.md §2.1; :mod:`.turbotunnel.clientbuffer`): KCP's
unacknowledged segments, the outgoing queues, the message being written to
each WebSocket (one at a time: a WebSocket's write buffer is not let grow),
each stream's write queue (one relay write at a time) and its upstream's
read side (opened with a small receive buffer,
:mod:`transports.common.upstream`). A session whose client acknowledges
nothing for the dead-link time with a WebSocket attached is closed.

Expected failures (a session over, a stream reset, a bad encapsulation, an
upstream that refuses) are counted and written at most once a second each,
never as a traceback, and no line names a client or proxy address unless
the operator asks (``--unsafe-logging``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import WSMsgType, web

from ptcommon.events import EventLog, run_until_stopped
from transports.base import Handoff, Streams
from transports.common import weblisten
from transports.common.budget import (
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
from transports.common.relay import relay
from transports.common.servertls import server_tls
from transports.common.upstream import READ_BUFFER, open_bounded, read_bound
from transports.common.weblisten import Listening
from transports.pt import extorport, messages

from .turbotunnel import TOKEN, encapsulation, smux
from .turbotunnel.clientbuffer import DEFAULT_CLIENT_BUFFER, MIN_SHARE, ClientBuffer, Meter
from .turbotunnel.clientmap import (
    DEAD_LINK_S,
    MAX_CLIENTS,
    QUEUE_LEN,
    QUEUE_TIMEOUT_S,
    SERVER_KEEPALIVE_TIMEOUT_S,
    ClientMap,
    ClientSession,
)
from .turbotunnel.streams import as_streams

log = logging.getLogger(__name__)

PREAMBLE_TIMEOUT_S = 10.0
MAX_MESSAGE = 32 * 1024
TRANSPORT_NAME = "snowflake"


@dataclass
class BridgeStats:
    websockets: int = 0
    bad_token: int = 0
    empty: int = 0
    streams: int = 0
    refused_streams: int = 0
    evicted_streams: int = 0
    shed_websockets: int = 0
    dead_links: int = 0
    relieved: int = 0
    peak_client_buffer: int = 0
    handoff_failures: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


@dataclass
class BridgeConfig:
    """Where streams go and the Turbo Tunnel timers (all overridable for tests)."""

    dest: tuple[str, int] | None = None
    orport: tuple[str, int] | None = None
    ext_orport: tuple[str, int] | None = None
    auth_cookie_file: Path | None = None
    queue_len: int = QUEUE_LEN
    queue_timeout_s: float = QUEUE_TIMEOUT_S
    keepalive_timeout_s: float = SERVER_KEEPALIVE_TIMEOUT_S
    preamble_timeout_s: float = PREAMBLE_TIMEOUT_S
    expire_interval_s: float = 5.0
    max_clients: int = MAX_CLIENTS
    # Each open stream holds an upstream connection; the WebSockets need theirs.
    max_streams: int = field(default_factory=lambda: max(16, (descriptor_budget() - RESERVE)
                                                         // 2))
    max_streams_per_client: int = 16
    # Bytes held for clients across all sessions (issue 48; clientbuffer.py).
    client_buffer: int = DEFAULT_CLIENT_BUFFER
    dead_link_s: float = DEAD_LINK_S
    # Client and proxy addresses in the log (the attach event): only if asked.
    unsafe_logging: bool = False
    # The HTTP limits an operator set (httpguard.LIMIT_OPTIONS words).
    http_options: dict[str, str] = field(default_factory=dict)
    clock: Callable[[], float] = field(default=time.monotonic)


def _client_addr(client_ip: str) -> str:
    """``ip:1`` for USERADDR (goptlib's stub port), IPv6 in brackets; ``""`` if unknown."""
    if not client_ip:
        return ""
    ip = ipaddress.ip_address(client_ip)
    return f"[{ip}]:1" if ip.version == 6 else f"{ip}:1"


def parse_client_ip(raw: str | None) -> str:
    """The ``client_ip`` query parameter if it is an IP address, else ``""``."""
    if not raw:
        return ""
    try:
        return str(ipaddress.ip_address(raw.strip("[]")))
    except ValueError:
        return ""


@dataclass
class _Link:
    """One WebSocket: its connection, and when it last brought anything."""

    transport: asyncio.Transport
    last_heard: float


def quiet_to_log(line: str) -> None:
    """Where a bridge outside the lab's and tor's processes counts its failures."""
    log.warning("%s", line)


class SnowflakeBridge:
    """The bridge's aiohttp application and its ClientID map."""

    def __init__(self, config: BridgeConfig, handoff: Handoff | None = None,
                 failures: QuietErrors | None = None) -> None:
        self.config = config
        self.stats = BridgeStats()
        self._handoff = handoff or self._default_handoff
        # Expected failures, one line a second each (docs/transports/budgets.md §3).
        self.failures = failures or QuietErrors(quiet_to_log, clock=config.clock)
        self.buffer = ClientBuffer(config.client_buffer, config.max_streams, clock=config.clock)
        self.clients = ClientMap(self._on_stream, queue_len=config.queue_len,
                                 queue_timeout_s=config.queue_timeout_s,
                                 keepalive_timeout_s=config.keepalive_timeout_s,
                                 max_clients=config.max_clients, clock=config.clock,
                                 buffer=self.buffer, dead_link_s=config.dead_link_s,
                                 failures=self.failures)
        self._writers: dict[asyncio.Task, asyncio.StreamWriter] = {}  # stream -> its writer
        self.app = web.Application()
        self.app.router.add_get("/{tail:.*}", self._websocket)
        self.app.on_startup.append(self._start_expiry)
        self.app.on_shutdown.append(self._close_websockets)
        self.app.on_cleanup.append(self._cleanup)
        self._tasks: list[asyncio.Task[None]] = []
        self._links: dict[web.WebSocketResponse, _Link] = {}
        # Called with (session, proxy address) when a WebSocket has sent its preamble.
        self.on_attach: Callable[[ClientSession, str], object] | None = None

    @property
    def open_streams(self) -> int:
        return self.buffer.open_streams

    @open_streams.setter
    def open_streams(self, n: int) -> None:
        self.buffer.open_streams = n

    @property
    def max_streams(self) -> int:
        """The stream cap in force: the configured one, lowered if the client buffer
        could not give each stream its minimum share."""
        return self.buffer.max_streams

    # -- lifecycle ----------------------------------------------------------
    async def _start_expiry(self, _app: web.Application) -> None:
        self._tasks = [asyncio.create_task(self._expire_loop()),
                       asyncio.create_task(self.failures.flush_forever())]

    async def _expire_loop(self) -> None:
        """Every second, end dead links; every ``expire_interval_s``, expire queues."""
        step = min(1.0, self.config.expire_interval_s)
        since = 0.0
        while True:
            await asyncio.sleep(step)
            self.clients.watch_links()
            since += step
            if since >= self.config.expire_interval_s:
                since = 0.0
                self.clients.expire()

    def sync_stats(self) -> BridgeStats:
        """The stats, with the figures other parts keep brought in."""
        self.stats.dead_links = self.clients.dead_links
        self.stats.relieved = self.buffer.relieved
        self.stats.peak_client_buffer = self.buffer.peak
        return self.stats

    async def _close_websockets(self, _app: web.Application) -> None:
        """At shutdown, before aiohttp waits for its handlers (up to a minute): a
        WebSocket's handler lasts as long as its session, so each is cut here and
        its handler ends at once (a client that reads nothing could not take a
        close frame anyway)."""
        for link in list(self._links.values()):
            link.transport.abort()

    async def _cleanup(self, _app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        for link in list(self._links.values()):
            link.transport.abort()
        await self.clients.close()
        self.failures.flush(final=True)

    def shed_websocket(self) -> bool:
        """At the connection cap: close the WebSocket silent longest (httpguard's
        ``shed``); whether there was one. Its session lives on, as after a proxy
        change; a client that reads keeps sending ACKs, so it is never the one."""
        if not self._links:
            return False
        ws, link = min(self._links.items(), key=lambda item: item[1].last_heard)
        self._links.pop(ws)
        link.transport.abort()
        self.stats.shed_websockets += 1
        return True

    # -- WebSocket ----------------------------------------------------------
    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        # writer_limit 0: every message waits until the connection has taken it, so
        # a client that reads nothing holds one message here, not a growing buffer.
        ws = web.WebSocketResponse(max_msg_size=1 << 20, autoping=True, writer_limit=0)
        if not ws.can_prepare(request).ok:
            return web.Response(status=400, text="Bad Request\n")
        await ws.prepare(request)
        transport = request.transport
        if transport is None:  # gone before the 101 was written
            return ws
        transport.set_write_buffer_limits(high=0)
        self.stats.websockets += 1
        link = self._links[ws] = _Link(transport, self.config.clock())
        try:
            await self._serve(ws, link, parse_client_ip(request.query.get("client_ip")),
                              request.remote or "")
        finally:
            self._links.pop(ws, None)
            if transport.is_closing():
                transport.abort()  # a client that reads nothing cannot take a close frame
            else:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), 1.0)
                transport.abort()
        return ws

    async def _serve(self, ws: web.WebSocketResponse, link: _Link, client_ip: str,
                     peer: str) -> None:
        buf = bytearray()
        try:
            async with asyncio.timeout(self.config.preamble_timeout_s):
                while len(buf) < 16:
                    data = await self._receive(ws, link)
                    if data is None:
                        if len(buf) < 8:
                            self.stats.empty += 1
                            self.failures.report("no-preamble", "a WebSocket ended before "
                                                                "its Turbo Tunnel preamble")
                        return
                    buf += data
                    if len(buf) >= 8 and bytes(buf[:8]) != TOKEN:
                        self.stats.bad_token += 1
                        self.failures.report("bad-token", "a WebSocket did not start with "
                                                          "Turbo Tunnel's token")
                        return
        except TimeoutError:
            self.stats.empty += 1
            self.failures.report("no-preamble", "a WebSocket sent no Turbo Tunnel preamble "
                                                "in time")
            return
        client_id = bytes(buf[8:16])
        session = self.clients.attach(client_id, client_ip)
        session.carriers.add(link.transport)
        if self.on_attach is not None:
            self.on_attach(session, peer)
        decoder = encapsulation.Decoder()
        down = asyncio.create_task(self._downstream(ws, session))
        try:
            rest = bytes(buf[16:])
            while True:
                if rest:
                    self.stats.bytes_up += len(rest)
                    session.incoming(decoder.feed(rest))
                if session.closed:
                    return
                data = await self._receive(ws, link)
                if data is None:
                    return
                rest = data
        except encapsulation.EncapsulationError as exc:
            self.failures.report("encapsulation", f"a WebSocket sent a bad encapsulation: {exc}")
        finally:
            session.carriers.discard(link.transport)
            down.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await down
            self.clients.detach(session)

    async def _receive(self, ws: web.WebSocketResponse, link: _Link) -> bytes | None:
        while True:
            msg = await ws.receive()
            link.last_heard = self.config.clock()
            if msg.type == WSMsgType.BINARY:
                return msg.data
            if msg.type == WSMsgType.TEXT:
                return msg.data.encode()
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED,
                            WSMsgType.ERROR):
                return None

    async def _downstream(self, ws: web.WebSocketResponse, session: ClientSession) -> None:
        queue = session.outgoing
        while True:  # cancelled by _serve when the WebSocket ends
            out = bytearray(encapsulation.encode(await session.get_packet()))
            while not queue.empty() and len(out) < MAX_MESSAGE - 1500:
                out += encapsulation.encode(session.next_packet())
            self.stats.bytes_down += len(out)
            # Counted until the connection has taken it all (writer_limit 0).
            session.writing.add(len(out))
            try:
                await ws.send_bytes(bytes(out))
            finally:
                session.writing.add(-len(out))

    # -- streams ------------------------------------------------------------
    async def _on_stream(self, stream: smux.Stream, session: ClientSession) -> None:
        cfg = self.config
        if session.streams >= cfg.max_streams_per_client or (
                self.open_streams >= self.max_streams and not self._make_room(session)):
            self.stats.refused_streams += 1
            await stream.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self.stats.streams += 1
        self.open_streams += 1
        session.stream_tasks.append(task)
        # What the stream holds for its client: its write queue, and its upstream's
        # read side at that side's bound (clientbuffer.py; transports/common/upstream.py).
        queued, upstream = Meter(session.meter), Meter(session.meter)
        upstream.set(read_bound(READ_BUFFER))
        try:
            inner = as_streams(stream, {"peername": (session.client_ip or "0.0.0.0", 1)},
                               high_water=0, meter=queued)
            self._writers[task] = inner[1]
            await self._handoff(inner, session.client_ip)
        finally:
            queued.clear()
            upstream.clear()
            self._writers.pop(task, None)
            if task in session.stream_tasks:  # not already counted out by _make_room
                self.open_streams -= 1
                session.stream_tasks.remove(task)

    def _make_room(self, newcomer: ClientSession) -> bool:
        """At the stream cap: end the oldest stream of the ClientID holding the most,
        if it holds more than ``newcomer`` does; whether room was made. A flood of
        ClientIDs with many streams each so loses streams to a client with one."""
        holders = [s for s in self.clients.sessions.values() if s.stream_tasks]
        if not holders:
            return False
        victim = max(holders, key=lambda s: s.streams)
        if victim.streams <= newcomer.streams:
            return False
        oldest = victim.stream_tasks.pop(0)
        self.open_streams -= 1  # now: it ends a moment later, the room is needed now
        writer = self._writers.pop(oldest, None)
        if writer is not None:
            # Abort, not close: a stream its client never reads cannot flush, and a
            # close would wait for ever; the relay then ends and closes the upstream.
            writer.transport.abort()
        else:
            oldest.cancel()
        self.stats.evicted_streams += 1
        return True

    async def _default_handoff(self, inner: Streams, client_ip: str) -> None:
        cfg = self.config
        try:
            if cfg.ext_orport is not None:
                assert cfg.auth_cookie_file is not None
                upstream = await extorport.open_extorport(
                    *cfg.ext_orport, cfg.auth_cookie_file, TRANSPORT_NAME,
                    _client_addr(client_ip), read_buffer=READ_BUFFER)
            else:
                target = cfg.orport or cfg.dest
                if target is None:
                    raise OSError("no destination configured")
                upstream = await open_bounded(*target, READ_BUFFER)
        except (OSError, extorport.ExtORPortError) as exc:
            self.stats.handoff_failures += 1
            self.failures.report("handoff", f"cannot hand a stream over: {describe_error(exc)}")
            inner[1].close()
            return
        await relay(inner, upstream)


async def listen(bridge: SnowflakeBridge, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None) -> Listening:
    guard = HttpGuard(limits_from_options(bridge.config.http_options, "snowflake server"))
    guard.shed = bridge.shed_websocket
    guard.failures = bridge.failures
    return await weblisten.listen(bridge.app, host, port, ssl_context, guard)


class SnowflakeServerFactory:
    """PT server mode: the bridge listens itself (WebSocket), and hands each
    stream to tor with the address the proxy reported. Its failures are tor's
    ``LOG`` lines, at info level, one a second each."""

    #: managed mode reads tor's side of each stream through a buffer this small
    #: (transports/common/upstream.py), which the client buffer counts.
    upstream_read_buffer = READ_BUFFER

    def __init__(self, config: BridgeConfig, ssl_context: ssl.SSLContext | None = None) -> None:
        self.config = config
        self.ssl_context = ssl_context

    def smethod_args(self) -> dict[str, str]:
        return {}

    async def listen(self, host: str, port: int, handoff: Handoff) -> Listening:
        async def to_tor(inner: Streams, client_ip: str) -> None:
            await handoff(inner, _client_addr(client_ip))
        failures = QuietErrors(lambda line: messages.log("info", f"snowflake: {line}"),
                               clock=self.config.clock)
        return await listen(SnowflakeBridge(self.config, to_tor, failures), host, port,
                            self.ssl_context)


#: The bridge's caps an operator may set: option word -> BridgeConfig field.
CAP_OPTIONS = {"max-clients": "max_clients", "max-streams": "max_streams",
               "max-streams-per-client": "max_streams_per_client",
               "client-buffer": "client_buffer"}
OPTIONS = {"cert", "key", "queue-timeout", "keepalive-timeout", "dead-link-timeout",
           *CAP_OPTIONS, *LIMIT_OPTIONS}


def config_from_options(options: dict[str, str]) -> BridgeConfig:
    """``queue-timeout``, ``keepalive-timeout`` and ``dead-link-timeout`` in
    seconds, the caps ``max-clients``, ``max-streams``, ``max-streams-per-client``
    and ``client-buffer`` (bytes), and the HTTP limits (httpguard.LIMIT_OPTIONS).
    ValueError, in one line, for anything else."""
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise ValueError(f"snowflake server: unknown option {unknown[0]!r} "
                         f"(known: {', '.join(sorted(OPTIONS))})")
    try:
        cfg = BridgeConfig(
            queue_timeout_s=float(options.get("queue-timeout", QUEUE_TIMEOUT_S)),
            keepalive_timeout_s=float(options.get("keepalive-timeout",
                                                  SERVER_KEEPALIVE_TIMEOUT_S)),
            dead_link_s=float(options.get("dead-link-timeout", DEAD_LINK_S)))
    except ValueError:
        raise ValueError("snowflake server: timeouts must be numbers of seconds") from None
    if not cfg.dead_link_s > 0:
        raise ValueError("snowflake server: dead-link-timeout must be above 0 seconds")
    for attr, value in caps_from_options(options, CAP_OPTIONS, "snowflake server").items():
        setattr(cfg, attr, value)
    if cfg.client_buffer < MIN_SHARE:
        raise ValueError(f"snowflake server: client-buffer must be at least {MIN_SHARE} bytes")
    cfg.http_options = {k: str(v) for k, v in options.items() if k in LIMIT_OPTIONS}
    limits_from_options(cfg.http_options, "snowflake server")  # refuse a bad value now
    return cfg


def server_factory_from_args(args: dict[str, str] | None) -> SnowflakeServerFactory:
    """Server options (TOR_PT_SERVER_TRANSPORT_OPTIONS): ``cert``/``key`` for TLS, and
    what :func:`config_from_options` reads."""
    args = dict(args or {})
    ctx = server_tls(args.pop("cert", None), args.pop("key", None), "snowflake server")
    return SnowflakeServerFactory(config_from_options(args), ctx)



async def _serve_forever(args, stop: asyncio.Event) -> int:
    events = EventLog("snowflake-bridge")
    cfg = args.config
    # asyncio's own reports (a failed accept() when descriptors run out) and the
    # bridge's expected failures: one line a second each, never a traceback.
    failures = QuietErrors(lambda line: events.emit("failures", message=line), clock=cfg.clock)
    failures.install(asyncio.get_running_loop())
    ctx = None
    if args.cert:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(args.cert, args.key)
    cfg.dest = split_hostport(args.dest)
    bridge = SnowflakeBridge(cfg, failures=failures)
    host, port = split_hostport(args.listen)
    try:
        listening = await listen(bridge, host, port, ctx)
    except OSError as exc:
        print(f"snowflake bridge: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    if cfg.unsafe_logging:
        bridge.on_attach = lambda cs, peer: events.emit(
            "attach", client_id=cs.client_id.hex(), client_ip=cs.client_ip, proxy=peer)
    else:
        bridge.on_attach = lambda cs, _peer: events.emit("attach", client_id=cs.client_id.hex())
    events.ready(listen=f"{listening.host}:{listening.port}", max_streams=bridge.max_streams,
                 client_buffer=cfg.client_buffer)
    await stop.wait()
    await listening.aclose()
    events.emit("stats", **vars(bridge.sync_stats()))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m transports.snowflake.server --listen H:P --dest H:P``: a bridge
    outside tor, sending every stream to one destination (the lab's mode)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m transports.snowflake.server",
                                description=(main.__doc__ or "").partition("\n")[0])
    p.add_argument("--listen", required=True, help="HOST:PORT for the WebSocket server")
    p.add_argument("--dest", required=True, help="HOST:PORT every stream is connected to")
    p.add_argument("--cert", help="TLS certificate (PEM); without it, plain ws://")
    p.add_argument("--key", help="TLS private key (PEM)")
    p.add_argument("--queue-timeout", type=float, default=QUEUE_TIMEOUT_S)
    p.add_argument("--keepalive-timeout", type=float, default=SERVER_KEEPALIVE_TIMEOUT_S)
    p.add_argument("--max-clients", help=f"ClientIDs remembered (default {MAX_CLIENTS})")
    p.add_argument("--max-streams", help="open streams in all (default: from the budget)")
    p.add_argument("--max-streams-per-client", help="open streams per ClientID (default 16)")
    p.add_argument("--client-buffer", help="bytes held for clients across all sessions "
                   f"(default {DEFAULT_CLIENT_BUFFER})")
    p.add_argument("--dead-link-timeout", type=float, default=DEAD_LINK_S,
                   help="seconds a client may acknowledge nothing with a WebSocket "
                        f"attached (default {DEAD_LINK_S:g})")
    p.add_argument("--unsafe-logging", action="store_true",
                   help="name the client's and the proxy's addresses in the log")
    add_limit_arguments(p)
    args = p.parse_args(argv)
    if bool(args.cert) != bool(args.key):
        p.error("--cert and --key go together")
    options = {"queue-timeout": str(args.queue_timeout),
               "keepalive-timeout": str(args.keepalive_timeout),
               "dead-link-timeout": str(args.dead_link_timeout), **limit_options(args)}
    for key in CAP_OPTIONS:
        if getattr(args, key.replace("-", "_")) is not None:
            options[key] = getattr(args, key.replace("-", "_"))
    try:
        split_hostport(args.listen), split_hostport(args.dest)
        raise_nofile_limit()  # before the caps are derived from the budget
        args.config = config_from_options(options)
        args.config.unsafe_logging = args.unsafe_logging
    except ValueError as exc:
        p.error(str(exc))
    return run_until_stopped("snowflake-bridge", lambda stop: _serve_forever(args, stop))


if __name__ == "__main__":
    raise SystemExit(main())
