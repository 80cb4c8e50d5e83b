"""``ptlab snowflake-proxy``: run our Snowflake proxy as a volunteer would.

Flags mirror Tor's ``snowflake-proxy`` where they overlap (single dash, same
names and defaults: Tor's public broker, relay, STUN server and NAT probe
service; durations in Go's form, ``24h`` or ``1m30s``, or plain seconds).
Ours: ``-nat`` (the NAT type to report until, or unless, the probe service
answers; ``-nat-probe-server ""`` turns probing off),
``-datachannel-timeout``, ``-inactivity-timeout``. Prometheus metrics are
served at ``http://<metrics-address>:<metrics-port>/internal/metrics`` with
``-metrics``, as in Tor's 2.6.1+.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import signal
import sys

from aiohttp import web

from ptcommon import gcpolicy
from transports.common import eventloop
from transports.common.budget import QuietErrors, raise_nofile_limit

from .messages import NAT_TYPES
from .proxy import SnowflakeProxy
from .proxyconfig import ProxyConfig
from .proxylogging import configure_logging
from .proxyworkers import SessionWorkers
from .udpports import PortRange, loop_factory

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                   "h": 3600.0}
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def go_duration(text: str) -> float:
    """Seconds from a Go duration (``24h``, ``1m30s``, ``500ms``) or a plain number."""
    text = text.strip()
    with contextlib.suppress(ValueError):
        value = float(text)
        if value >= 0:
            return value
        raise argparse.ArgumentTypeError(f"negative duration {text!r}")
    pos, total = 0, 0.0
    for match in _DURATION_RE.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (e.g. 24h, 1m30s, 5)")
    return total


#: ``ptlab snowflake-proxy -h``'s description: the module's docstring as plain text.
DESCRIPTION = (
    "Run our Snowflake proxy as a volunteer would. Flags mirror Tor's snowflake-proxy "
    "where they overlap: single dash, the same names and defaults (Tor's public broker, "
    "relay, STUN server and NAT probe service), durations in Go's form (24h, 1m30s) or "
    "plain seconds. Prometheus metrics are served at "
    "http://<metrics-address>:<metrics-port>/internal/metrics with -metrics, as in Tor's "
    "2.6.1 and later.")


def _version() -> str:
    from importlib import metadata

    try:
        return f"ptlab snowflake-proxy {metadata.version('ptlab')}"
    except metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "ptlab snowflake-proxy (version unknown: not installed)"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = ProxyConfig()
    p = argparse.ArgumentParser(prog="ptlab snowflake-proxy", description=DESCRIPTION)
    p.add_argument("-version", action="version", version=_version(),
                   help="print the version and exit")
    p.add_argument("-broker", default=d.broker, help="broker URL (default %(default)s)")
    p.add_argument("-relay", default=d.relay,
                   help="relay URL when the broker names none (default %(default)s)")
    p.add_argument("-stun", default=",".join(d.stun),
                   help="comma-separated STUN URLs (default %(default)s)")
    p.add_argument("-allowed-relay-hostname-pattern", default=d.allowed_relay_pattern,
                   help="the relays the broker may name: a hostname suffix, with ^ for an "
                        "exact name (default %(default)s)")
    p.add_argument("-allow-non-tls-relay", action="store_true",
                   help="accept a ws:// relay URL (off: wss:// only)")
    p.add_argument("-allow-proxying-to-private-addresses", action="store_true",
                   help="let the relay resolve to a private address (off)")
    p.add_argument("-keep-local-addresses", action="store_true",
                   help="keep local addresses in SDP (off: only public ones are offered)")
    p.add_argument("-ephemeral-ports-range", default="",
                   help='ICE UDP ports, "<min>:<max>" (default: any port)')
    p.add_argument("-capacity", type=int, default=0,
                   help="maximum clients at once (default %(default)s: unlimited)")
    p.add_argument("-workers", type=int, default=1,
                   help="processes that serve clients, to use more than one core (ours; "
                        "default 1: clients are served in this process)")
    p.add_argument("-poll-interval", type=go_duration, default=d.poll_interval_s,
                   help="time between polls (default 5s)")
    p.add_argument("-nat", choices=NAT_TYPES, default=d.nat,
                   help="the NAT type reported until, or unless, the probe service answers "
                        "(ours; default %(default)s)")
    p.add_argument("-nat-probe-server", default=d.nat_probe_url,
                   help='NAT probe service URL ("": do not probe; default %(default)s)')
    p.add_argument("-nat-retest-interval", type=go_duration, default=d.nat_retest_interval_s,
                   help="time between NAT tests (0: only at start; default 24h)")
    p.add_argument("-summary-interval", type=go_duration, default=d.summary_interval_s,
                   help="time between summary log lines (0: none; default 1h)")
    p.add_argument("-datachannel-timeout", type=float, default=d.datachannel_timeout_s,
                   help="seconds a client has to open its data channel (ours; default "
                        "%(default)s)")
    p.add_argument("-inactivity-timeout", type=float, default=d.inactivity_timeout_s,
                   help="seconds without data from the relay before a session closes "
                        "(ours; default %(default)s)")
    p.add_argument("-unsafe-logging", action="store_true",
                   help="log client addresses (off: they are scrubbed)")
    p.add_argument("-verbose", action="store_true",
                   help="debug logging, the WebRTC libraries' included (off: info)")
    p.add_argument("-metrics", action="store_true", help="serve Prometheus metrics")
    p.add_argument("-metrics-address", default="localhost",
                   help="address of the metrics server (default %(default)s)")
    p.add_argument("-metrics-port", type=int, default=9999,
                   help="port of the metrics server (default %(default)s)")
    args = p.parse_args(argv)
    if args.capacity < 0 or args.poll_interval <= 0 or args.workers < 1:
        p.error("-capacity must be >= 0, -poll-interval > 0 and -workers >= 1")
    args.ports = None
    if args.ephemeral_ports_range:
        try:
            args.ports = PortRange.parse(args.ephemeral_ports_range)
        except ValueError as exc:
            p.error(f"-ephemeral-ports-range: {exc}")
    return args


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    """The proxy's config from parsed flags (one proxy, or each of a pool's)."""
    return ProxyConfig(
        broker=args.broker, relay=args.relay,
        stun=[s.strip() for s in args.stun.split(",") if s.strip()],
        allowed_relay_pattern=args.allowed_relay_hostname_pattern,
        allow_non_tls_relay=args.allow_non_tls_relay,
        allow_private_relay=args.allow_proxying_to_private_addresses,
        keep_local_addresses=args.keep_local_addresses, capacity=args.capacity,
        poll_interval_s=args.poll_interval, nat=args.nat, check_relay_reachable=True,
        nat_probe_url=args.nat_probe_server, nat_retest_interval_s=args.nat_retest_interval,
        datachannel_timeout_s=args.datachannel_timeout,
        summary_interval_s=args.summary_interval,
        inactivity_timeout_s=args.inactivity_timeout, unsafe_logging=args.unsafe_logging)


async def _run(args: argparse.Namespace) -> None:
    cfg = config_from_args(args)
    proxy = SnowflakeProxy(cfg)
    workers = None
    if args.workers > 1:
        workers = await SessionWorkers(cfg, args.workers, proxy.stats,
                                       args.ephemeral_ports_range or None,
                                       args.verbose).start()
        proxy.workers = workers
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = None
    if args.metrics:
        app = web.Application()

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(text=proxy.stats.prometheus(),
                                content_type="text/plain", charset="utf-8")

        app.router.add_get("/internal/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, args.metrics_address, args.metrics_port).start()
    log = logging.getLogger("snowflake-proxy")
    # As Go's runtime does for Tor's proxy: every descriptor the hard limit allows;
    # running out is one line a second (transports/common/budget.py).
    budget = raise_nofile_limit()
    QuietErrors(log.warning).install(loop)
    log.info("proxy starting (broker %s; descriptor budget %d; %d worker process%s; "
             "%s event loop)", cfg.broker, budget, args.workers,
             "" if args.workers == 1 else "es", eventloop.name(loop))
    gcpolicy.for_packet_loop()
    try:
        await proxy.run(stop)
    finally:
        if workers is not None:
            await workers.close()
        if runner is not None:
            await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.verbose)
    ports = args.ports
    try:
        with asyncio.Runner(loop_factory=loop_factory(ports)) as runner:
            runner.run(_run(args))
    except OSError as exc:
        print(f"snowflake-proxy: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
