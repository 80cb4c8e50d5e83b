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
once.
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
from transports.common.budget import RESERVE, descriptor_budget
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
from transports.common.weblisten import Listening
from transports.pt import extorport

from .turbotunnel import TOKEN, encapsulation, smux
from .turbotunnel.clientmap import (
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


class SnowflakeBridge:
    """The bridge's aiohttp application and its ClientID map."""

    def __init__(self, config: BridgeConfig, handoff: Handoff | None = None) -> None:
        self.config = config
        self.stats = BridgeStats()
        self._handoff = handoff or self._default_handoff
        self.clients = ClientMap(self._on_stream, queue_len=config.queue_len,
                                 queue_timeout_s=config.queue_timeout_s,
                                 keepalive_timeout_s=config.keepalive_timeout_s,
                                 max_clients=config.max_clients, clock=config.clock)
        self.open_streams = 0
        self._writers: dict[asyncio.Task, asyncio.StreamWriter] = {}  # stream -> its writer
        self.app = web.Application()
        self.app.router.add_get("/{tail:.*}", self._websocket)
        self.app.on_startup.append(self._start_expiry)
        self.app.on_cleanup.append(self._cleanup)
        self._expiry: asyncio.Task[None] | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        # Called with (session, proxy address) when a WebSocket has sent its preamble.
        self.on_attach: Callable[[ClientSession, str], object] | None = None

    # -- lifecycle ----------------------------------------------------------
    async def _start_expiry(self, _app: web.Application) -> None:
        self._expiry = asyncio.create_task(self._expire_loop())

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.expire_interval_s)
            self.clients.expire()

    async def _cleanup(self, _app: web.Application) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.close()
        await self.clients.close()

    # -- WebSocket ----------------------------------------------------------
    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=1 << 20, autoping=True)
        if not ws.can_prepare(request).ok:
            return web.Response(status=400, text="Bad Request\n")
        await ws.prepare(request)
        self.stats.websockets += 1
        self._sockets.add(ws)
        try:
            await self._serve(ws, parse_client_ip(request.query.get("client_ip")),
                              request.remote or "")
        finally:
            self._sockets.discard(ws)
            await ws.close()
        return ws

    async def _serve(self, ws: web.WebSocketResponse, client_ip: str, peer: str) -> None:
        buf = bytearray()
        try:
            async with asyncio.timeout(self.config.preamble_timeout_s):
                while len(buf) < 16:
                    data = await self._receive(ws)
                    if data is None:
                        if len(buf) < 8:
                            self.stats.empty += 1
                        return
                    buf += data
                    if len(buf) >= 8 and bytes(buf[:8]) != TOKEN:
                        self.stats.bad_token += 1
                        return
        except TimeoutError:
            self.stats.empty += 1
            return
        client_id = bytes(buf[8:16])
        session = self.clients.attach(client_id, client_ip)
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
                data = await self._receive(ws)
                if data is None:
                    return
                rest = data
        except encapsulation.EncapsulationError as exc:
            log.info("client %s: bad encapsulation: %s", client_id.hex(), exc)
        finally:
            down.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await down
            self.clients.detach(session)

    @staticmethod
    async def _receive(ws: web.WebSocketResponse) -> bytes | None:
        while True:
            msg = await ws.receive()
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
            packet = await queue.get()
            out = bytearray(encapsulation.encode(packet))
            while not queue.empty() and len(out) < MAX_MESSAGE - 1500:
                out += encapsulation.encode(queue.get_nowait())
            self.stats.bytes_down += len(out)
            await ws.send_bytes(bytes(out))

    # -- streams ------------------------------------------------------------
    async def _on_stream(self, stream: smux.Stream, session: ClientSession) -> None:
        cfg = self.config
        if session.streams >= cfg.max_streams_per_client or (
                self.open_streams >= cfg.max_streams and not self._make_room(session)):
            self.stats.refused_streams += 1
            await stream.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self.stats.streams += 1
        self.open_streams += 1
        session.stream_tasks.append(task)
        try:
            inner = as_streams(stream, {"peername": (session.client_ip or "0.0.0.0", 1)})
            self._writers[task] = inner[1]
            await self._handoff(inner, session.client_ip)
        finally:
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
                    *cfg.ext_orport, cfg.auth_cookie_file, TRANSPORT_NAME, _client_addr(client_ip))
            else:
                target = cfg.orport or cfg.dest
                if target is None:
                    raise OSError("no destination configured")
                upstream = await asyncio.open_connection(*target)
        except (OSError, extorport.ExtORPortError) as exc:
            self.stats.handoff_failures += 1
            log.warning("cannot hand a stream over: %s", exc)
            inner[1].close()
            return
        await relay(inner, upstream)


async def listen(bridge: SnowflakeBridge, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None) -> Listening:
    guard = HttpGuard(limits_from_options(bridge.config.http_options, "snowflake server"))
    return await weblisten.listen(bridge.app, host, port, ssl_context, guard)


class SnowflakeServerFactory:
    """PT server mode: the bridge listens itself (WebSocket), and hands each
    stream to tor with the address the proxy reported."""

    def __init__(self, config: BridgeConfig, ssl_context: ssl.SSLContext | None = None) -> None:
        self.config = config
        self.ssl_context = ssl_context

    def smethod_args(self) -> dict[str, str]:
        return {}

    async def listen(self, host: str, port: int, handoff: Handoff) -> Listening:
        async def to_tor(inner: Streams, client_ip: str) -> None:
            await handoff(inner, _client_addr(client_ip))
        return await listen(SnowflakeBridge(self.config, to_tor), host, port, self.ssl_context)


#: The bridge's caps an operator may set: option word -> BridgeConfig field.
CAP_OPTIONS = {"max-clients": "max_clients", "max-streams": "max_streams",
               "max-streams-per-client": "max_streams_per_client"}
OPTIONS = {"cert", "key", "queue-timeout", "keepalive-timeout", *CAP_OPTIONS, *LIMIT_OPTIONS}


def config_from_options(options: dict[str, str]) -> BridgeConfig:
    """``queue-timeout`` and ``keepalive-timeout`` in seconds, the caps
    ``max-clients``, ``max-streams`` and ``max-streams-per-client``, and the HTTP
    limits (httpguard.LIMIT_OPTIONS). ValueError, in one line, for anything else."""
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise ValueError(f"snowflake server: unknown option {unknown[0]!r} "
                         f"(known: {', '.join(sorted(OPTIONS))})")
    try:
        cfg = BridgeConfig(
            queue_timeout_s=float(options.get("queue-timeout", QUEUE_TIMEOUT_S)),
            keepalive_timeout_s=float(options.get("keepalive-timeout",
                                                  SERVER_KEEPALIVE_TIMEOUT_S)))
    except ValueError:
        raise ValueError("snowflake server: timeouts must be numbers of seconds") from None
    for attr, value in caps_from_options(options, CAP_OPTIONS, "snowflake server").items():
        setattr(cfg, attr, value)
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
    ctx = None
    if args.cert:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(args.cert, args.key)
    cfg = args.config
    cfg.dest = split_hostport(args.dest)
    bridge = SnowflakeBridge(cfg)
    host, port = split_hostport(args.listen)
    try:
        listening = await listen(bridge, host, port, ctx)
    except OSError as exc:
        print(f"snowflake bridge: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    bridge.on_attach = lambda cs, peer: events.emit(
        "attach", client_id=cs.client_id.hex(), client_ip=cs.client_ip, proxy=peer)
    events.ready(listen=f"{listening.host}:{listening.port}")
    await stop.wait()
    events.emit("stats", **vars(bridge.stats))
    await listening.aclose()
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
    add_limit_arguments(p)
    args = p.parse_args(argv)
    if bool(args.cert) != bool(args.key):
        p.error("--cert and --key go together")
    options = {"queue-timeout": str(args.queue_timeout),
               "keepalive-timeout": str(args.keepalive_timeout), **limit_options(args)}
    for key in CAP_OPTIONS:
        if getattr(args, key.replace("-", "_")) is not None:
            options[key] = getattr(args, key.replace("-", "_"))
    try:
        split_hostport(args.listen), split_hostport(args.dest)
        args.config = config_from_options(options)
    except ValueError as exc:
        p.error(str(exc))
    return run_until_stopped("snowflake-bridge", lambda stop: _serve_forever(args, stop))


if __name__ == "__main__":
    raise SystemExit(main())
