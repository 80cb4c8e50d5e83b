"""The TLS edge of the cdn namespace: a CDN-like front that routes by Host.

Domain fronting only works because a CDN terminates TLS for many names and
then routes each request by its HTTP Host header, not by the TLS SNI. This
edge does exactly that: meek's fronted server, Snowflake's fronted rendezvous
and benign sites all sit behind it, so a censor that sees SNI "front.lab"
cannot tell which origin a request reaches without blocking the whole front.

Config (JSON or TOML, ``--config F``)::

    {"routes": {"front.lab": "http://198.18.7.2:80", "*.cdn.lab": "http://...",
                "meek.lab": {"origin": "http://198.18.3.2:7002", "mode": "reflector"}},
     "default": null}

A ``reflector`` route behaves like meek's App Engine reflector
(docs/transports/meek.md §3.1): only ``Content-Type`` and ``X-Session-Id`` pass,
both ways, and the
client's address goes to the origin as ``Meek-IP``. Other routes pass headers
like a CDN, adding ``X-Forwarded-For``. Upstream connections are kept alive
and reused (one connection pool for all origins).

``*.x`` matches any subdomain of ``x`` (not ``x`` itself); the longest match
wins, exact names first. Unknown hosts get a generic 404 that never names an
origin. Upstream reads have no timeout by default, so long polls pass.

Run: ``python -m ptlab.services.edge --config F [--listen H:P ...]
[--http-listen H:P ...] (--tls-cert C --tls-key K | --ca-dir D)``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import time
import tomllib
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from ptcommon.events import EventLog
from ptlab.services.ca import LabCA, normalize_dns_name
from ptlab.services.main import ConfigError, run_service
from ptlab.services.web import parse_listen, server_tls_context, start_sites

COMPONENT = "edge"
CHUNK = 65536

# RFC 9110 §7.6.1 hop-by-hop headers, plus ones a proxy must not pass on.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "expect",
})

NOT_FOUND_PAGE = ("<!doctype html>\n<html><head><title>404 Not Found</title></head>"
                  "<body><h1>404 Not Found</h1><p>The requested site is not served here."
                  "</p></body></html>\n")
BAD_GATEWAY_PAGE = ("<!doctype html>\n<html><head><title>502 Bad Gateway</title></head>"
                    "<body><h1>502 Bad Gateway</h1><p>The site is unavailable.</p>"
                    "</body></html>\n")
GATEWAY_TIMEOUT_PAGE = ("<!doctype html>\n<html><head><title>504 Gateway Timeout</title>"
                        "</head><body><h1>504 Gateway Timeout</h1></body></html>\n")


# -- configuration ----------------------------------------------------------

@dataclass
class EdgeConfig:
    """Routes from Host pattern to origin base URL (no trailing slash)."""

    routes: dict[str, str] = field(default_factory=dict)
    default: str | None = None
    reflect: frozenset[str] = frozenset()  # route patterns in reflector mode

    def route(self, host: str | None) -> tuple[str | None, str | None]:
        """The (pattern, origin) serving ``host``, or (None, default)."""
        name = normalize_host(host)
        if name:
            if name in self.routes:
                return name, self.routes[name]
            labels = name.split(".")
            # Longest wildcard first: for a.b.cdn.lab try *.b.cdn.lab, *.cdn.lab, *.lab.
            for i in range(1, len(labels)):
                pattern = "*." + ".".join(labels[i:])
                if pattern in self.routes:
                    return pattern, self.routes[pattern]
        return None, self.default


def normalize_host(host: str | None) -> str:
    """A Host header without port, lower-case, without trailing dot."""
    if not host:
        return ""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else ""
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _check_origin(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: origin must be a URL string, got {value!r}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(f"{where}: bad origin URL {value!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: bad origin URL {value!r} (want http://host[:port])")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"{where}: origin URL {value!r} must not have query, fragment "
                          "or credentials")
    return value.rstrip("/")


def parse_config(data: Any) -> EdgeConfig:
    """Validate a decoded config; errors name the offending key path."""
    if not isinstance(data, dict):
        raise ConfigError("config: top level must be a table/object")
    unknown = sorted(set(data) - {"routes", "default"})
    if unknown:
        raise ConfigError(f"config: unknown key {unknown[0]!r} (allowed: routes, default)")
    routes_in = data.get("routes", {})
    if not isinstance(routes_in, dict):
        raise ConfigError("routes: must be a table/object of host -> origin URL")
    routes: dict[str, str] = {}
    reflect: set[str] = set()
    for pattern, origin in routes_in.items():
        where = f"routes[{pattern!r}]"
        try:
            name = normalize_dns_name(str(pattern))
        except ValueError:
            raise ConfigError(f"{where}: bad host pattern {pattern!r}") from None
        if name in routes:
            raise ConfigError(f"{where}: duplicate host pattern")
        if isinstance(origin, dict):
            extra = sorted(set(origin) - {"origin", "mode"})
            if extra:
                raise ConfigError(f"{where}: unknown key {extra[0]!r} (allowed: origin, mode)")
            mode = origin.get("mode", "cdn")
            if mode not in ("cdn", "reflector"):
                raise ConfigError(f"{where}.mode: must be cdn or reflector, got {mode!r}")
            if mode == "reflector":
                reflect.add(name)
            origin = origin.get("origin")
        routes[name] = _check_origin(origin, where)
    default = data.get("default")
    if default is not None:
        default = _check_origin(default, "default")
    return EdgeConfig(routes, default, frozenset(reflect))


def load_config(path: Path | str) -> EdgeConfig:
    """Read ``path`` as TOML (``.toml``) or JSON (anything else)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"--config {path}: cannot parse: {exc}") from None
    return parse_config(data)


# -- proxying ---------------------------------------------------------------

def _connection_tokens(headers: Any) -> set[str]:
    tokens: set[str] = set()
    for value in headers.getall("Connection", []):
        tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return tokens


def upstream_headers(request: web.Request, proto: str) -> CIMultiDict[str]:
    """Request headers for the origin: hop-by-hop removed, client address added."""
    drop = HOP_BY_HOP | _connection_tokens(request.headers)
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in request.headers.items():
        if key.lower() not in drop:
            out.add(key, value)
    client = request.remote or "unknown"
    prior = ", ".join(out.popall("X-Forwarded-For", []))
    out["X-Forwarded-For"] = f"{prior}, {client}" if prior else client
    node = f'"[{client}]"' if ":" in client else client
    prior = ", ".join(out.popall("Forwarded", []))
    fwd = f"for={node};proto={proto}"
    out["Forwarded"] = f"{prior}, {fwd}" if prior else fwd
    out["X-Real-IP"] = client
    out["X-Forwarded-Proto"] = proto
    if "Host" in request.headers:
        out["X-Forwarded-Host"] = request.headers["Host"]
    return out


REFLECTED = ("Content-Type", "X-Session-Id")


def reflector_headers(headers: Any, client: str | None = None) -> CIMultiDict[str]:
    """Only what meek's reflector passes on, plus ``Meek-IP`` toward the origin."""
    out: CIMultiDict[str] = CIMultiDict()
    for key in REFLECTED:
        if key in headers:
            out[key] = headers[key]
    if client is not None:
        out["Meek-IP"] = client
    return out


def downstream_headers(upstream: aiohttp.ClientResponse) -> CIMultiDict[str]:
    """Response headers for the client, without hop-by-hop ones or framing."""
    drop = HOP_BY_HOP | _connection_tokens(upstream.headers) | {"content-length"}
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in upstream.headers.items():
        if key.lower() not in drop:
            out.add(key, value)
    return out


class Edge:
    """The proxy application: one aiohttp app, one upstream client session."""

    def __init__(self, config: EdgeConfig, events: EventLog, *,
                 connect_timeout: float | None = 10.0, read_timeout: float | None = None,
                 origin_ssl: ssl.SSLContext | None = None) -> None:
        self.config = config
        self.events = events
        self.timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout,
                                             sock_connect=connect_timeout,
                                             sock_read=read_timeout)
        self.origin_ssl = origin_ssl
        self.session: aiohttp.ClientSession | None = None
        # SNI seen per TLS connection, recorded by the SNI callback.
        self._sni: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def attach_sni_logging(self, ctx: ssl.SSLContext) -> None:
        """Remember each connection's SNI so events can show SNI != Host (fronting)."""

        def on_sni(sslobj: Any, name: str | None, _ctx: ssl.SSLContext) -> None:
            if name:
                self._sni[sslobj] = name

        ctx.sni_callback = on_sni

    def app(self) -> web.Application:
        application = web.Application(client_max_size=0)
        application.router.add_route("*", "/{tail:.*}", self.handle)
        application.on_startup.append(self._open)
        application.on_cleanup.append(self._close)
        return application

    async def _open(self, _app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=0, ssl=self.origin_ssl or True)
        self.session = aiohttp.ClientSession(
            connector=connector, timeout=self.timeout, auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"))

    async def _close(self, _app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        start = time.monotonic()
        host_header = request.headers.get("Host")
        pattern, origin = self.config.route(host_header)
        sslobj = request.transport.get_extra_info("ssl_object") if request.transport else None
        fields: dict[str, Any] = {
            "host": normalize_host(host_header), "method": request.method,
            "path": request.path, "origin": origin, "route": pattern,
            "peer": request.remote, "sni": self._sni.get(sslobj) if sslobj else None}
        status, sent = 500, 0
        try:
            if origin is None:
                status = 404
                resp: web.StreamResponse = web.Response(
                    status=404, text=NOT_FOUND_PAGE, content_type="text/html")
                sent = len(NOT_FOUND_PAGE)
                return resp
            resp, status, sent = await self._proxy(request, origin, fields,
                                                   reflector=pattern in self.config.reflect)
            return resp
        except asyncio.CancelledError:
            fields["aborted"] = "client"
            raise
        finally:
            fields.update(status=status, bytes=sent,
                          duration=round(time.monotonic() - start, 6))
            self.events.emit("proxied", **fields)

    async def _proxy(self, request: web.Request, origin: str, fields: dict[str, Any],
                     reflector: bool = False) -> tuple[web.StreamResponse, int, int]:
        assert self.session is not None
        proto = "https" if request.secure else "http"
        headers = (reflector_headers(request.headers, request.remote or "unknown")
                   if reflector else upstream_headers(request, proto))
        body: AsyncIterator[bytes] | None = None
        if request.body_exists:
            body = request.content.iter_chunked(CHUNK)
        try:
            upstream = await self.session.request(
                request.method, URL(origin + request.raw_path, encoded=True),
                headers=headers, data=body, allow_redirects=False, compress=None)
        except TimeoutError:
            fields["error"] = "timeout"
            return web.Response(status=504, text=GATEWAY_TIMEOUT_PAGE,
                                content_type="text/html"), 504, len(GATEWAY_TIMEOUT_PAGE)
        except (aiohttp.ClientError, OSError) as exc:
            fields["error"] = type(exc).__name__
            return web.Response(status=502, text=BAD_GATEWAY_PAGE,
                                content_type="text/html"), 502, len(BAD_GATEWAY_PAGE)
        sent = 0
        async with upstream:
            resp = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                      headers=reflector_headers(upstream.headers) if reflector
                                      else downstream_headers(upstream))
            length = upstream.headers.get("Content-Length")
            if length is not None and length.isdigit() and "chunked" not in \
                    upstream.headers.get("Transfer-Encoding", "").lower():
                resp.content_length = int(length)
            await resp.prepare(request)
            if request.method == "HEAD":
                return resp, upstream.status, 0
            while True:
                try:
                    piece = await upstream.content.readany()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    # Headers are out: cut the connection so a truncated body
                    # never looks complete to the client.
                    fields.update(aborted="origin", error=type(exc).__name__)
                    if request.transport is not None:
                        request.transport.abort()
                    return resp, upstream.status, sent
                if not piece:
                    break
                try:
                    await resp.write(piece)
                except (ConnectionError, aiohttp.ClientError):
                    fields["aborted"] = "client"
                    return resp, upstream.status, sent
                sent += len(piece)
            await resp.write_eof()
        return resp, upstream.status, sent


# -- service ----------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ptlab.services.edge",
                                     description="ptlab CDN-like TLS edge (routes by Host)")
    parser.add_argument("--config", required=True, help="routes file (.toml or JSON)")
    parser.add_argument("--listen", action="append", default=[], metavar="HOST:PORT",
                        help="TLS listener (repeatable; default port 443; default "
                             "0.0.0.0:443 unless only --http-listen is given)")
    parser.add_argument("--http-listen", action="append", default=[], metavar="HOST:PORT",
                        help="plain HTTP listener (repeatable; default port 80)")
    parser.add_argument("--tls-cert", help="PEM certificate chain for all front names")
    parser.add_argument("--tls-key", help="PEM private key for --tls-cert")
    parser.add_argument("--ca-dir", help="lab CA directory: issue a cert for every route name")
    parser.add_argument("--tls-name", action="append", default=[], metavar="NAME",
                        help="extra DNS name for the issued cert (with --ca-dir)")
    parser.add_argument("--cert-stem", default="edge", help="file stem with --ca-dir")
    parser.add_argument("--origin-ca", help="CA file to verify https:// origins")
    parser.add_argument("--connect-timeout", type=float, default=10.0,
                        help="seconds to connect to an origin (0 = none)")
    parser.add_argument("--read-timeout", type=float, default=0.0,
                        help="seconds between upstream reads before giving up (0 = none)")
    parser.add_argument("--shutdown-timeout", type=float, default=1.0,
                        help="seconds to let in-flight requests finish on SIGTERM")
    return parser


def _tls_context(args: argparse.Namespace, config: EdgeConfig,
                 specs: list[tuple[str, int]]) -> tuple[ssl.SSLContext, str]:
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        return server_tls_context(args.tls_cert, args.tls_key), args.tls_cert
    if not args.ca_dir:
        raise ConfigError("TLS listeners need --tls-cert/--tls-key or --ca-dir")
    names = sorted(set(config.routes) | set(args.tls_name))
    ips = sorted({host for host, _ in specs if host not in ("0.0.0.0", "::")
                  and all(c in "0123456789abcdef.:" for c in host.lower())})
    try:
        cert, key = LabCA.load_or_create(args.ca_dir).issue(names, ips, args.cert_stem)
    except ValueError as exc:
        raise ConfigError(f"--ca-dir: {exc}") from None
    return server_tls_context(str(cert), str(key)), str(cert)


async def serve(args: argparse.Namespace, events: EventLog, stop: asyncio.Event) -> None:
    config = load_config(args.config)
    tls_specs = [parse_listen(s, 443) for s in args.listen]
    if not tls_specs and not args.http_listen:
        tls_specs = [("0.0.0.0", 443)]
    http_specs = [parse_listen(s, 80) for s in args.http_listen]
    origin_ssl = None
    if args.origin_ca:
        try:
            origin_ssl = ssl.create_default_context(cafile=args.origin_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"--origin-ca {args.origin_ca}: {exc}") from None
    edge = Edge(config, events, connect_timeout=args.connect_timeout or None,
                read_timeout=args.read_timeout or None, origin_ssl=origin_ssl)
    tls_ctx, cert_path = None, None
    if tls_specs:
        tls_ctx, cert_path = _tls_context(args, config, tls_specs)
        edge.attach_sni_logging(tls_ctx)
    runner = web.AppRunner(edge.app(), access_log=None,
                           shutdown_timeout=args.shutdown_timeout)
    await runner.setup()
    try:
        tls_addrs = await start_sites(runner, tls_specs, tls_ctx) if tls_specs else []
        http_addrs = await start_sites(runner, http_specs, None) if http_specs else []
        events.emit("ready", tls_addresses=tls_addrs, http_addresses=http_addrs,
                    routes=sorted(config.routes), default=config.default is not None,
                    cert=cert_path)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    return run_service(COMPONENT, build_parser(), serve, argv)


if __name__ == "__main__":
    raise SystemExit(main())

