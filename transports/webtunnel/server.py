"""The WebTunnel server: one upgrade request per connection, then a raw byte pipe to tor.

It sits behind a web server (nginx, Apache, Caddy) that terminates TLS, answers
everything else, and forwards one secret path here (docs/transports/webtunnel.md
§2.2, §4). So, as Tor's server does, it checks only the ``Connection`` and
``Upgrade`` fields, and anything else is closed with no answer at all: probes
are the front web server's business, and this port should not be reachable
from outside.

Ours on top of Tor's server (§5.2): the request head has a size cap
(``max_head_bytes``) and a deadline (``handshake_timeout_s``); at most
``max_unauthenticated`` connections may wait for theirs, the oldest closed
first past that; bytes the client sent after its request are kept; and the
server may run TLS itself (``cert=``/``key=``), for tests and setups without a
front.

A bridge announces the synthetic address of its url, not its bind address
(:meth:`WebTunnelServerFactory.smethod_address`). Logs never carry client
addresses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from dataclasses import dataclass, field

from transports.base import Handoff
from transports.common.budget import unauthenticated_cap
from transports.common.servertls import server_tls
from transports.common.silence import Gatekeeper, ServerPolicy
from transports.pt.messages import format_addr

from .httphead import MAX_HEAD_BYTES, HeadError
from .synthetic import SYNTHETIC_PORT, VERSION, synthetic_address
from .upgrade import UpgradeError, forwarded_address, server_upgrade

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 30.0
OPTIONS = ("url", "cert", "key", "max-unauthenticated")


@dataclass
class ServerConfig:
    url: str
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    max_head_bytes: int = MAX_HEAD_BYTES
    max_unauthenticated: int = field(default_factory=unauthenticated_cap)


@dataclass
class ServerStats:
    upgraded: int = 0
    refused: int = 0
    # Connections closed because of an exception the server did not expect: a
    # defect to fix, counted apart so that tests and fuzzing can insist on zero.
    unexpected: int = 0


def _reason(exc: BaseException) -> str:
    """Why a connection was closed, without the addresses an OSError may carry."""
    if isinstance(exc, OSError) and exc.errno:
        return f"{type(exc).__name__}: {os.strerror(exc.errno)}"
    if isinstance(exc, TimeoutError):
        return "no complete request before the deadline"
    return str(exc) or type(exc).__name__


class WebTunnelServer:
    """The per-connection handler (:meth:`handle`); ``handoff`` gets each tunnel."""

    def __init__(self, config: ServerConfig, handoff: Handoff) -> None:
        self.config = config
        self.handoff = handoff
        self.gate = Gatekeeper(ServerPolicy(handshake_timeout_s=config.handshake_timeout_s,
                                            max_unauthenticated=config.max_unauthenticated))
        self.stats = ServerStats()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection. Being cancelled (shutdown) ends it quietly: nobody awaits
        this task, and Python 3.11 logs a traceback for a cancelled connection
        callback (3.12 no longer does)."""
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        peer_addr = format_addr(peer[0], peer[1]) if peer else "0.0.0.0:0"
        try:
            with self.gate.admitted(writer, reader):
                request = await asyncio.wait_for(
                    server_upgrade(reader, writer, self.config.max_head_bytes),
                    self.config.handshake_timeout_s)
        except (HeadError, UpgradeError, TimeoutError, OSError) as exc:
            self._refuse(writer, "closed a connection without answering: " + _reason(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a bridge must outlive any one connection
            self.stats.unexpected += 1
            self._refuse(writer, f"closed a connection on an unexpected error: "
                                 f"{type(exc).__name__}")
            return
        self.stats.upgraded += 1
        try:
            await self.handoff((reader, writer), forwarded_address(request, peer_addr))
        except Exception as exc:  # noqa: BLE001 - the handoff's failure ends one tunnel only
            log.warning("webtunnel: handing a tunnel over failed: %s", _reason(exc))
            writer.close()

    def _refuse(self, writer: asyncio.StreamWriter, message: str) -> None:
        self.stats.refused += 1
        log.info("webtunnel: %s", message)
        writer.close()


@dataclass
class Listening:
    """A running server: where it listens, and how to stop it."""

    server: asyncio.Server
    host: str
    port: int

    def close(self) -> None:
        self.server.close()

    async def aclose(self) -> None:
        self.server.close()
        with contextlib.suppress(Exception):
            await self.server.wait_closed()


async def listen(server: WebTunnelServer, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None) -> Listening:
    """Serve on ``host:port`` (port 0: any); TLS when ``ssl_context`` is given."""
    if ssl_context:
        accepting = await asyncio.start_server(
            server.handle, host, port, ssl=ssl_context,
            ssl_handshake_timeout=server.config.handshake_timeout_s)
    else:
        accepting = await asyncio.start_server(server.handle, host, port)
    bound_host, bound_port = accepting.sockets[0].getsockname()[:2]
    return Listening(accepting, bound_host, bound_port)


def config_from_options(options: dict[str, str]) -> tuple[ServerConfig, ssl.SSLContext | None]:
    """Server options (``TOR_PT_SERVER_TRANSPORT_OPTIONS``): ``url`` (required, the
    public url clients use), and ours: ``cert``/``key`` for TLS without a front, and
    ``max-unauthenticated`` (default: from the descriptor budget,
    docs/transports/budgets.md §2)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"webtunnel server: unknown option {unknown[0]!r} "
                         f"(known: {', '.join(OPTIONS)})")
    url = options.get("url", "")
    if not url:
        raise ValueError("missing url parameter")
    tls = server_tls(options.get("cert"), options.get("key"), "webtunnel server")
    config = ServerConfig(url)
    if "max-unauthenticated" in options:
        try:
            config.max_unauthenticated = int(options["max-unauthenticated"])
        except ValueError:
            raise ValueError("max-unauthenticated must be a whole number") from None
        if config.max_unauthenticated < 1:
            raise ValueError("max-unauthenticated must be at least 1")
    return config, tls


class WebTunnelServerFactory:
    """PT server mode: listens itself, so each tunnel reaches tor with the
    ``X-Forwarded-For`` address rather than the front's."""

    def __init__(self, config: ServerConfig, ssl_context: ssl.SSLContext | None = None) -> None:
        self.config, self.ssl_context = config, ssl_context

    def smethod_args(self) -> dict[str, str]:
        return {"url": self.config.url, "ver": VERSION}

    def smethod_address(self) -> tuple[str, int]:
        """The address the SMETHOD line announces: the url's synthetic one, as Tor's
        server does (docs/transports/webtunnel.md §4)."""
        return str(synthetic_address(self.config.url)), SYNTHETIC_PORT

    async def listen(self, host: str, port: int, handoff: Handoff) -> Listening:
        return await listen(WebTunnelServer(self.config, handoff), host, port,
                            self.ssl_context)
