"""The web/destination server: what every workload ultimately talks to.

It serves deterministic bulk payloads (so goodput is measured on bytes whose
hash the client knows in advance), a tiny ``/ping`` for latency, a page that
names the site (benign traffic), ``/echo-headers`` (to check what the CDN edge
tells origins about clients) and ``POST /sink`` (uploads). One ``request``
event per request feeds the runner's accounting.

Run: ``python -m ptlab.services.web --listen HOST:PORT [--listen ...]
[--tls-cert F --tls-key F] [--name SITE]``. Port 0 binds an ephemeral port;
the ``ready`` event reports the real one.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import html
import ipaddress
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ptcommon.events import EventLog
from ptlab.services.main import ConfigError, run_service
from ptlab.services.payload import payload_chunks

COMPONENT = "web"
MAX_BULK = 4 << 30

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- listening helpers (shared with the edge) --------------------------------

def parse_listen(spec: str, default_port: int) -> tuple[str, int]:
    """Parse ``HOST:PORT``, ``[V6]:PORT``, ``HOST``, ``[V6]`` or ``:PORT``.

    An empty host means all IPv4 interfaces.
    """
    spec = spec.strip()
    port_text = ""
    if spec.startswith("["):
        end = spec.find("]")
        if end < 0:
            raise ConfigError(f"--listen {spec!r}: missing ']'")
        host, rest = spec[1:end], spec[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ConfigError(f"--listen {spec!r}: expected ':' after ']'")
            port_text = rest[1:]
    elif spec.count(":") == 1:
        host, port_text = spec.split(":")
    elif ":" in spec:
        raise ConfigError(f"--listen {spec!r}: write IPv6 addresses as [addr]:port")
    else:
        host = spec
    host = host or "0.0.0.0"
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"--listen {spec!r}: bad port {port_text!r}")
    return host, int(port_text)


def format_addr(host: str, port: int) -> str:
    """``host:port`` with IPv6 hosts in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound, listening-ready TCP socket (v6 sockets are v6-only so v4 can share the port)."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        family, host = infos[0][0], str(infos[0][4][0])
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def start_sites(runner: web.AppRunner, specs: list[tuple[str, int]],
                      ssl_context: ssl.SSLContext | None) -> list[str]:
    """Start one site per listen address and return the bound ``host:port`` strings."""
    bound = []
    for host, port in specs:
        sock = bind_socket(host, port)
        site = web.SockSite(runner, sock, ssl_context=ssl_context, backlog=512)
        await site.start()
        name = sock.getsockname()
        bound.append(format_addr(name[0], name[1]))
    return bound


def server_tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A TLS 1.2/1.3 server context; bad files become a ConfigError."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--tls-cert/--tls-key: cannot load {cert}, {key}: {exc}") from None
    return ctx


class CountingResponse(web.StreamResponse):
    """A streamed response that remembers how much body it sent, for the events."""

    sent: int = 0
    aborted: bool = False


def body_length(request: web.Request, resp: web.StreamResponse | None) -> int:
    """Body bytes a handler sent: streamed handlers count them, plain responses know them."""
    if isinstance(resp, CountingResponse):
        return resp.sent
    body = getattr(resp, "body", None)
    if request.method == "HEAD" or not isinstance(body, bytes | bytearray):
        return 0
    return len(body)


# -- the site ---------------------------------------------------------------

def _int_param(request: web.Request, name: str, default: int | None,
               lo: int | None = None, hi: int | None = None) -> int:
    raw = request.query.get(name)
    if raw is None:
        if default is None:
            raise web.HTTPBadRequest(text=f"missing parameter {name}\n")
        return default
    try:
        value = int(raw, 10)
    except ValueError:
        raise web.HTTPBadRequest(text=f"bad parameter {name}\n") from None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise web.HTTPBadRequest(text=f"parameter {name} out of range [{lo}, {hi}]\n")
    return value


async def handle_bulk(request: web.Request) -> web.StreamResponse:
    """Stream ``size`` deterministic bytes for ``seed``, with a Content-Length."""
    size = _int_param(request, "size", None, 0, MAX_BULK)
    seed = _int_param(request, "seed", 0)
    resp = CountingResponse(headers={"Content-Type": "application/octet-stream",
                                     "Cache-Control": "no-store"})
    resp.content_length = size
    await resp.prepare(request)
    if request.method == "HEAD":
        return resp
    try:
        for piece in payload_chunks(size, seed):
            await resp.write(piece)
            resp.sent += len(piece)
        await resp.write_eof()
    except ConnectionError:
        resp.aborted = True
    return resp


async def handle_ping(request: web.Request) -> web.Response:
    return web.Response(text="pong\n", headers={"Cache-Control": "no-store"})


async def handle_echo_headers(request: web.Request) -> web.Response:
    """The request headers as JSON (duplicates joined with ', '), plus the TCP peer."""
    headers: dict[str, str] = {}
    for key, value in request.headers.items():
        lower = key.lower()
        headers[lower] = f"{headers[lower]}, {value}" if lower in headers else value
    return web.json_response({"peer": request.remote, "method": request.method,
                              "path": request.path_qs, "headers": headers})


async def handle_sink(request: web.Request) -> web.Response:
    """Swallow an upload and report its size and hash (upload goodput)."""
    digest = hashlib.sha256()
    received = 0
    async for piece in request.content.iter_any():
        digest.update(piece)
        received += len(piece)
    return web.json_response({"bytes": received, "sha256": digest.hexdigest()})


def create_app(name: str, events: EventLog) -> web.Application:
    """The web site's aiohttp application, emitting one ``request`` event per request."""

    page = (f"<!doctype html>\n<html><head><title>{html.escape(name)}</title></head>"
            f"<body><h1>{html.escape(name)}</h1><p>Welcome to {html.escape(name)}, "
            "a site in the ptlab lab.</p></body></html>\n")

    async def handle_index(request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html")

    @web.middleware
    async def log_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
        start = time.monotonic()
        status = 500
        aborted = False
        resp: web.StreamResponse | None = None
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except web.HTTPException as exc:
            status, resp = exc.status, exc
            raise
        except asyncio.CancelledError:
            aborted = True
            raise
        except Exception as exc:  # never let one request take the server down
            events.emit("error", site=name, path=request.path, error=repr(exc))
            resp = web.Response(status=500, text="internal error\n")
            return resp
        finally:
            fields: dict[str, Any] = {
                "site": name, "method": request.method, "path": request.path,
                "status": status, "bytes": body_length(request, resp),
                "peer": request.remote, "duration": round(time.monotonic() - start, 6)}
            if aborted or getattr(resp, "aborted", False):
                fields["aborted"] = True
            events.emit("request", **fields)

    app = web.Application(middlewares=[log_requests])
    app.router.add_get("/", handle_index)
    app.router.add_get("/bulk", handle_bulk)
    app.router.add_get("/ping", handle_ping)
    app.router.add_get("/echo-headers", handle_echo_headers)
    app.router.add_post("/sink", handle_sink)
    return app


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ptlab.services.web",
                                     description="ptlab web/destination server")
    parser.add_argument("--listen", action="append", default=[], metavar="HOST:PORT",
                        help="address to listen on (repeatable; [v6]:port; port 0 = any; "
                             "default 0.0.0.0:80, or :443 with TLS)")
    parser.add_argument("--tls-cert", help="PEM certificate chain (enables HTTPS)")
    parser.add_argument("--tls-key", help="PEM private key for --tls-cert")
    parser.add_argument("--name", default="web", help="site name for pages and events")
    parser.add_argument("--shutdown-timeout", type=float, default=1.0,
                        help="seconds to let in-flight requests finish on SIGTERM")
    return parser


async def serve(args: argparse.Namespace, events: EventLog, stop: asyncio.Event) -> None:
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    ssl_context = server_tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    default_port = 443 if ssl_context else 80
    specs = [parse_listen(s, default_port) for s in (args.listen or ["0.0.0.0"])]
    runner = web.AppRunner(create_app(args.name, events), access_log=None,
                           shutdown_timeout=args.shutdown_timeout)
    await runner.setup()
    try:
        addresses = await start_sites(runner, specs, ssl_context)
        events.emit("ready", site=args.name, addresses=addresses, tls=ssl_context is not None)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    return run_service(COMPONENT, build_parser(), serve, argv)


if __name__ == "__main__":
    raise SystemExit(main())
