"""``python -m broker``: run the Snowflake broker.

Flags follow Tor's broker where they overlap (``--addr``, ``--disable-tls``,
``--cert``/``--key``, ``--allowed-relay-pattern``, ``--default-relay-pattern``,
``--bridge-list-path``); the rest are ours (timers, rate limits, the trusted
edge). Prints one JSON ``ready`` line when it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from fractions import Fraction

from ptcommon.events import EventLog, run_until_stopped
from transports.common.budget import CLIENT_BUFFER, QuietErrors, raise_nofile_limit
from transports.common.httpguard import (
    HttpGuard,
    add_limit_arguments,
    limit_options,
    limits_from_options,
)
from transports.common.httpguard import serve as serve_guarded

from .app import Broker, BrokerConfig, MetricsConfig
from .bridges import BridgeListError, load
from .dpmetrics import BudgetExceeded
from .labgeo import GeoIPError, LabGeoIP


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m broker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--addr", default=":443", help="HOST:PORT to listen on (default :443)")
    p.add_argument("--disable-tls", action="store_true", help="serve plain HTTP")
    p.add_argument("--cert", help="TLS certificate (PEM)")
    p.add_argument("--key", help="TLS private key (PEM)")
    p.add_argument("--allowed-relay-pattern", default="snowflake.torproject.net$")
    p.add_argument("--default-relay-pattern", default=None,
                   help="pattern presumed for proxies that send none, as Tor's 2.5.1 "
                        "broker had; without it they are refused, as by Tor's since 2.12")
    p.add_argument("--bridge-list-path", help="JSON lines of bridges (default: snowflake-01)")
    p.add_argument("--proxy-timeout", type=float, default=10.0, help="proxy long poll (s)")
    p.add_argument("--client-timeout", type=float, default=5.0,
                   help="how long a client waits for an answer (s; Tor's since 2.11; "
                        "2.5.1 waited 10)")
    p.add_argument("--next-poll", type=int, default=20_000,
                   help="NextPoll sent to proxies (ms; 0 to omit it, as 2.5.1 does)")
    p.add_argument("--rate", type=float, default=20.0, help="requests/s per source")
    p.add_argument("--burst", type=float, default=60.0, help="burst per source")
    p.add_argument("--unknown-proxies-unrestricted", action="store_true",
                   help="match proxies whose NAT is unknown as unrestricted (a lab without NAT)")
    p.add_argument("--metrics-period", type=float, default=86400.0,
                   help="seconds between differentially private metrics releases")
    p.add_argument("--metrics-epsilon", type=Fraction, default=Fraction(1, 2),
                   help="epsilon per release (two releases per period)")
    p.add_argument("--geoip", help="lab GeoIP map: 'PREFIX CC' per line")
    p.add_argument("--trusted-edge", action="append", default=[],
                   help="address of a front (the lab's TLS edge) whose X-Forwarded-For counts")
    p.add_argument("--client-buffer", type=int, default=CLIENT_BUFFER,
                   help="bytes all requests may hold (default %(default)s): caps the "
                        "connections at it over twice the read limit, unless "
                        "--http-max-connections is given")
    add_limit_arguments(p)
    return p.parse_args(argv)


def connection_cap(client_buffer: int, read_limit: int) -> int:
    """The connections ``client_buffer`` allows: each holds a request body of at most
    ``read_limit`` bytes and, for a client, the answer it waits for, no larger
    (docs/transports/budgets.md §2.1); at least 32, as httpguard's own cap."""
    return max(32, client_buffer // (2 * read_limit))


COMPONENT = "broker"


def _fail(msg: str) -> int:
    print(f"broker: {msg}", file=sys.stderr)
    return 2


async def serve(args: argparse.Namespace, cfg: BrokerConfig, tls: ssl.SSLContext | None,
                stop: asyncio.Event) -> int:
    host, _, port = args.addr.rpartition(":")
    broker = Broker(cfg)
    # Strangers poll a broker: every descriptor the hard limit allows, caps derived
    # from it, slowloris shed, one quiet line a second when a resource runs out
    # (docs/transports/budgets.md).
    budget = raise_nofile_limit()
    events = EventLog(COMPONENT)

    def failure(line: str) -> None:
        events.emit("failures", message=line)

    quiet = QuietErrors(failure)
    quiet.install(asyncio.get_running_loop())
    flusher = asyncio.create_task(quiet.flush_forever())
    # The edge (a CDN or domain front) carries everyone's polls: no per-address share.
    guard = HttpGuard(limits_from_options(limit_options(args), COMPONENT,
                                          max_body=cfg.read_limit, trusted=cfg.trusted_edges))
    if args.http_max_connections is None:  # an operator's own cap wins
        guard.limits.max_connections = min(guard.limits.max_connections,
                                           connection_cap(args.client_buffer, cfg.read_limit))
    # aiohttp's own expected errors (a malformed request, a client gone): counted
    # in the same log, one line a second each.
    guard.failures = quiet
    broker.failures = quiet
    try:
        runner, server = await serve_guarded(broker.app(), host.strip("[]") or None, int(port),
                                             tls, guard)
    except OSError as exc:
        return _fail(f"cannot listen on {args.addr}: {exc.strerror or exc}")
    events.ready(listen=args.addr, tls=tls is not None, descriptor_budget=budget,
                 max_connections=guard.limits.max_connections)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), args.metrics_period)
        except TimeoutError:
            try:
                broker.publish()
            except BudgetExceeded as exc:
                events.emit("metrics_refused", why=str(exc))
    events.emit("stats", **broker.stats.__dict__, **guard.stats.__dict__)
    server.close()
    await runner.cleanup()
    flusher.cancel()
    quiet.flush(final=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _, _, port = args.addr.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        return _fail(f"--addr {args.addr!r}: expected HOST:PORT")
    tls = None
    if not args.disable_tls:
        if not (args.cert and args.key):
            return _fail("TLS needs --cert and --key (or --disable-tls)")
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(args.cert, args.key)
        except (OSError, ssl.SSLError) as exc:
            return _fail(f"cannot load --cert/--key: {exc}")
    try:
        bridges = load(args.bridge_list_path)
    except BridgeListError as exc:
        return _fail(str(exc))
    try:
        geo = LabGeoIP.load(args.geoip) if args.geoip else LabGeoIP()
    except (GeoIPError, OSError) as exc:
        return _fail(f"--geoip: {exc}")
    if args.metrics_period <= 0 or args.metrics_epsilon <= 0:
        return _fail("--metrics-period and --metrics-epsilon must be positive")
    if args.client_buffer < 1:
        return _fail("--client-buffer must be a positive number of bytes")
    try:
        limits_from_options(limit_options(args), COMPONENT)
    except ValueError as exc:
        return _fail(str(exc).removeprefix(f"{COMPONENT}: "))
    cfg = BrokerConfig(proxy_timeout_s=args.proxy_timeout, client_timeout_s=args.client_timeout,
                       next_poll_ms=args.next_poll or None,
                       allowed_relay_pattern=args.allowed_relay_pattern,
                       default_relay_pattern=args.default_relay_pattern, bridges=bridges,
                       rate_per_s=args.rate, burst=args.burst,
                       trusted_edges=tuple(args.trusted_edge),
                       unknown_proxies_unrestricted=args.unknown_proxies_unrestricted,
                       metrics=MetricsConfig(epsilon=args.metrics_epsilon,
                                             budget=2 * args.metrics_epsilon, geoip=geo))
    return run_until_stopped(COMPONENT, lambda stop: serve(args, cfg, tls, stop))


if __name__ == "__main__":
    raise SystemExit(main())
