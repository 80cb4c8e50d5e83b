"""The common ``main`` of every lab service process.

A service module defines an ``argparse`` parser and an async ``serve(args,
events, stop)`` coroutine that starts listening, emits ``ready``, and returns
when ``stop`` is set. This wrapper turns SIGTERM/SIGINT into ``stop``, bad
configuration into a one-line error with exit status 2, and a missing
privilege (binding port 53 or 443 without root) into a one-line error too.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable

from ptcommon.events import EventLog

Serve = Callable[[argparse.Namespace, EventLog, asyncio.Event], Awaitable[None]]


class ConfigError(ValueError):
    """Bad configuration, reported in one line."""


def run_service(component: str, parser: argparse.ArgumentParser, serve: Serve,
                argv: list[str] | None = None) -> int:
    args = parser.parse_args(argv)
    events = EventLog(component)

    async def amain() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(args, events, stop)

    try:
        asyncio.run(amain())
    except ConfigError as exc:
        print(f"{component}: bad config: {exc}", file=sys.stderr)
        return 2
    except PermissionError as exc:
        print(f"{component}: missing privilege: {exc} (run as root)", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{component}: {exc}", file=sys.stderr)
        return 1
    events.emit("stopped")
    return 0
