"""The common ``main`` of every lab service process.

A service module defines an ``argparse`` parser and an async ``serve(args,
events, stop)`` coroutine that starts listening, emits ``ready``, and returns
when ``stop`` is set. Signals, bad configuration and a missing privilege (binding
port 53 or 443 without root) are handled by the process contract's one
``main`` (:func:`ptcommon.events.run_until_stopped`).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable

from ptcommon.events import ConfigError, EventLog, run_until_stopped

__all__ = ["ConfigError", "Serve", "run_service"]

Serve = Callable[[argparse.Namespace, EventLog, asyncio.Event], Awaitable[None]]


def run_service(component: str, parser: argparse.ArgumentParser, serve: Serve,
                argv: list[str] | None = None) -> int:
    args = parser.parse_args(argv)
    events = EventLog(component)
    status = run_until_stopped(component, lambda stop: serve(args, events, stop))
    if status == 0:
        events.emit("stopped")
    return status
