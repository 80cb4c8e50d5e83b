"""``ptlab snowflake-proxy``: run our Snowflake proxy as a volunteer would.

Flags mirror Tor's ``snowflake-proxy`` where they overlap (single dash, same
names and defaults: Tor's public broker, relay and STUN server). Ours:
``-nat`` (the NAT type to report when no probe service is reachable),
``-datachannel-timeout``, ``-inactivity-timeout``. Prometheus metrics are
served at ``http://<metrics-address>:<metrics-port>/internal/metrics`` with
``-metrics``, as in Tor's 2.6.1+.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from aiohttp import web

from .messages import NAT_TYPES
from .proxy import ProxyConfig, SnowflakeProxy


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = ProxyConfig()
    p = argparse.ArgumentParser(prog="ptlab snowflake-proxy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-broker", default=d.broker, help="broker URL")
    p.add_argument("-relay", default=d.relay, help="relay URL when the broker names none")
    p.add_argument("-stun", default=",".join(d.stun), help="comma-separated STUN URLs")
    p.add_argument("-allowed-relay-hostname-pattern", default=d.allowed_relay_pattern)
    p.add_argument("-allow-non-tls-relay", action="store_true")
    p.add_argument("-allow-proxying-to-private-addresses", action="store_true")
    p.add_argument("-keep-local-addresses", action="store_true")
    p.add_argument("-capacity", type=int, default=0, help="maximum clients (0: unlimited)")
    p.add_argument("-poll-interval", type=float, default=d.poll_interval_s, help="seconds")
    p.add_argument("-nat", choices=NAT_TYPES, default=d.nat)
    p.add_argument("-datachannel-timeout", type=float, default=d.datachannel_timeout_s)
    p.add_argument("-inactivity-timeout", type=float, default=d.inactivity_timeout_s)
    p.add_argument("-unsafe-logging", action="store_true", help="log client addresses")
    p.add_argument("-verbose", action="store_true")
    p.add_argument("-metrics", action="store_true", help="serve Prometheus metrics")
    p.add_argument("-metrics-address", default="localhost")
    p.add_argument("-metrics-port", type=int, default=9999)
    args = p.parse_args(argv)
    if args.capacity < 0 or args.poll_interval <= 0:
        p.error("-capacity must be >= 0 and -poll-interval > 0")
    return args


async def _run(args: argparse.Namespace) -> None:
    cfg = ProxyConfig(
        broker=args.broker, relay=args.relay,
        stun=[s.strip() for s in args.stun.split(",") if s.strip()],
        allowed_relay_pattern=args.allowed_relay_hostname_pattern,
        allow_non_tls_relay=args.allow_non_tls_relay,
        allow_private_relay=args.allow_proxying_to_private_addresses,
        keep_local_addresses=args.keep_local_addresses, capacity=args.capacity,
        poll_interval_s=args.poll_interval, nat=args.nat,
        datachannel_timeout_s=args.datachannel_timeout,
        inactivity_timeout_s=args.inactivity_timeout, unsafe_logging=args.unsafe_logging)
    proxy = SnowflakeProxy(cfg)
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
    logging.getLogger("snowflake-proxy").info("proxy starting (broker %s)", cfg.broker)
    try:
        await proxy.run(stop)
    finally:
        if runner is not None:
            await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(message)s")
    if not args.verbose:
        for noisy in ("aioice", "aiortc"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        asyncio.run(_run(args))
    except OSError as exc:
        print(f"snowflake-proxy: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
