"""The event loop our packet-heavy processes run on: uvloop where it is installed.

A Snowflake proxy's work is per packet: every SCTP packet is a UDP datagram
read or written, a DTLS record, and a hop through asyncio's task and
callback machinery. With asyncio's pure-Python selector loop that machinery
was the larger share of the proxy's CPU; on uvloop (libuv, in Cython) the
same 20-client transfer took less than half the CPU and moved more than three
times the bytes (docs/transports/snowflake.md §3.10).

uvloop is a base dependency on Linux and macOS, from wheels. Where it is
missing (another platform, or an install without it) the standard loop runs,
with the same behaviour, only slower. ``PTLAB_EVENT_LOOP=asyncio`` chooses the
standard loop anyway, to compare the two or to rule uvloop out of a problem.
"""

from __future__ import annotations

import asyncio
import os

ENV = "PTLAB_EVENT_LOOP"


def loop_class() -> type[asyncio.AbstractEventLoop]:
    """The class of loop to run: uvloop's, unless it is missing or turned off."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice not in ("", "uvloop", "asyncio"):
        raise ValueError(f"{ENV}={choice!r}: must be 'uvloop' or 'asyncio'")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise ValueError(f"{ENV}=uvloop, but uvloop is not installed") from None
        else:
            return uvloop.Loop
    return asyncio.SelectorEventLoop


def name(loop: asyncio.AbstractEventLoop) -> str:
    """"uvloop" or "asyncio", for the start-up log line (subclasses included)."""
    uv = any(c.__module__.startswith("uvloop") for c in type(loop).__mro__)
    return "uvloop" if uv else "asyncio"
