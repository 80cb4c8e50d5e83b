"""Several of our Snowflake proxies in one process, each in a namespace of its own.

Why: one aiortc proxy per process costs about 79 MiB of resident memory
(benchmarks/snowflake_scale.py: 100 proxies, 7.9 GiB), nearly all of it the
interpreter and the stacks it imports (aiortc, aiohttp, cryptography).
Threads share that. Each thread moves into its proxy's network namespace
(:func:`netns.nsenter.enter_namespace`) and runs an event loop of its own, so
each proxy polls the broker, gathers ICE candidates and dials the relay from
its own address, as N processes would. The GIL puts a pool on one core: run
one pool per core.

    python -m ptlab.processes.proxypool --netns NS [--netns NS ...] -- SNOWFLAKE-PROXY-FLAGS

The flags are ``ptlab snowflake-proxy``'s (``-metrics`` excepted: one port
cannot serve N proxies). Log lines carry the namespace as the thread's name.
The pool prints one JSON ``ready`` event once every proxy has started, ends
them all on SIGTERM or SIGINT, and exits 2 with one line if any cannot start.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from netns.nsenter import NETNS_DIR, enter_namespace
from ptcommon.events import EventLog
from transports.snowflake.proxy import SnowflakeProxy
from transports.snowflake.proxy_cli import config_from_args
from transports.snowflake.proxy_cli import parse_args as proxy_args
from transports.snowflake.proxyconfig import ProxyConfig
from transports.snowflake.udpports import PortRange, loop_factory

log = logging.getLogger("snowflake-proxy")


_emit = EventLog("snowflake-proxypool").emit


def source_address(url: str) -> str:
    """The address this thread's packets to `url`'s host leave from (its namespace's
    route decides; a connected UDP socket sends nothing). "?" when there is none."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host:
        return "?"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((host, parts.port or 443))
            return str(s.getsockname()[0])
    except (OSError, ValueError):
        return "?"


class ProxyPool:
    """One thread, one namespace, one event loop and one proxy per entry of `namespaces`."""

    def __init__(self, namespaces: list[str], config: ProxyConfig,
                 ports: PortRange | None) -> None:
        self.namespaces, self.config, self.ports = namespaces, config, ports
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._loops: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._stopping = False
        self.started = 0
        self.all_started = threading.Event()

    def start(self) -> None:
        for ns in self.namespaces:
            t = threading.Thread(target=self._serve, args=(ns,), name=ns, daemon=True)
            self.threads.append(t)
            t.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            for loop, stop in self._loops:
                loop.call_soon_threadsafe(stop.set)

    def alive(self) -> int:
        return sum(t.is_alive() for t in self.threads)

    def _serve(self, ns: str) -> None:
        try:
            enter_namespace(ns)
            with asyncio.Runner(loop_factory=loop_factory(self.ports)) as runner:
                runner.run(self._one())
        except Exception as exc:  # one proxy's failure is reported, never silent
            with self._lock:
                self.errors.append(f"{ns}: {type(exc).__name__}: {exc}")
            self.stop()

    async def _one(self) -> None:
        stop = asyncio.Event()
        with self._lock:
            self._loops.append((asyncio.get_running_loop(), stop))
            if self._stopping:
                stop.set()
        proxy = SnowflakeProxy(self.config)
        log.info("proxy starting (broker %s, from %s)", self.config.broker,
                 source_address(self.config.broker))
        with self._lock:
            self.started += 1
            if self.started == len(self.namespaces):
                self.all_started.set()
        await proxy.run(stop)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ptlab.processes.proxypool",
                                description=__doc__.splitlines()[0])
    p.add_argument("--netns", action="append", required=True,
                   help="a network namespace for one proxy (repeat, one per proxy)")
    p.add_argument("flags", nargs=argparse.REMAINDER, help="-- then snowflake-proxy flags")
    args = p.parse_args(argv)
    flags = args.flags[1:] if args.flags[:1] == ["--"] else args.flags
    pargs = proxy_args(flags)
    if pargs.metrics:
        print("proxypool: -metrics serves one proxy; run pools without it", file=sys.stderr)
        return 2
    if len(set(args.netns)) != len(args.netns):
        print("proxypool: a namespace is named twice", file=sys.stderr)
        return 2
    missing = [ns for ns in args.netns if not (Path(NETNS_DIR) / ns).exists()]
    if missing:
        print(f"proxypool: no network namespace {missing[0]!r}", file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if pargs.verbose else logging.INFO,
                        format="%(asctime)s [%(threadName)s] %(message)s")
    if not pargs.verbose:
        for noisy in ("aioice", "aiortc"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    pool = ProxyPool(args.netns, config_from_args(pargs), pargs.ports)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: pool.stop())
    pool.start()
    ready = False
    while pool.alive():
        if not ready and pool.all_started.is_set():
            ready = True
            _emit("ready", proxies=len(args.netns))
        if pool.errors:
            pool.stop()
        time.sleep(0.1)
    if pool.errors:
        print(f"proxypool: {pool.errors[0]}"
              + (f" (and {len(pool.errors) - 1} more)" if len(pool.errors) > 1 else ""),
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
