"""A server's descriptor budget, the caps derived from it, and quiet resource errors.

A server facing the open internet must not let a flood of strangers take the
descriptors that a legitimate client needs (issue 29, docs/transports/budgets.md).
So, at start, it raises its soft ``RLIMIT_NOFILE`` to the hard limit, as Go's
runtime has done since Go 1.19 (obfs4proxy, snowflake-proxy and lyrebird get it
for free), and it derives every cap from the limit it got, keeping a reserve for
its listeners, its logs and the upstream side.

When a resource runs out anyway, asyncio reports every failed ``accept()`` with a
traceback, tens of thousands a minute. :class:`QuietErrors` replaces that with one
line per kind of error per interval, which counts what it left out.
"""

from __future__ import annotations

import asyncio
import errno
import os
import resource
import time
from collections.abc import Callable
from typing import Any

# Descriptors kept back from every cap: listeners, log files, the event loop's own,
# and the upstream connections of sessions being set up.
RESERVE = 64
# The most unauthenticated connections any one server keeps, whatever its budget:
# each may hold a read buffer, so memory bounds this too.
MAX_UNAUTHENTICATED = 4096
UNLIMITED = 1 << 20  # what an unlimited RLIMIT_NOFILE counts as
# What a server holds for its clients (buffered data) in all, by default: the
# Snowflake bridge's ``client-buffer`` and the meek server's and the broker's
# (docs/transports/budgets.md §2.1). Under issue 48's 3,000 never-read sessions
# the bridge peaks at about 230 MiB of RSS with it, inside the 300 MiB goal.
CLIENT_BUFFER = 96 << 20
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def descriptor_budget() -> int:
    """The soft descriptor limit this process has now."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return 1024
    return UNLIMITED if soft == resource.RLIM_INFINITY else int(soft)


def raise_nofile_limit() -> int:
    """Raise the soft descriptor limit to the hard one; return the budget it gives."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):
        pass  # a container may forbid it: the budget is what we have
    return descriptor_budget()


def unauthenticated_cap(budget: int | None = None) -> int:
    """How many connections may wait for a handshake: a third of the budget after the
    reserve, so a flood of them leaves two thirds for relayed sessions (two
    descriptors each). 320 at the common limit of 1,024; at most 4,096."""
    b = descriptor_budget() if budget is None else budget
    return max(16, min(MAX_UNAUTHENTICATED, (b - RESERVE) // 3))


def describe_error(exc: BaseException) -> str:
    """An error in a few words, without the addresses ``str(OSError)`` carries
    (asyncio puts the peer's address in ``strerror``: "Connect call failed (...)")."""
    if isinstance(exc, OSError) and exc.errno:
        return f"{type(exc).__name__}: {os.strerror(exc.errno)}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def is_resource_error(exc: BaseException | None) -> bool:
    """Out of descriptors or buffers: an expected condition under load, not a bug."""
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


class QuietErrors:
    """An event-loop exception handler that reports resource and connection errors
    in one line (no traceback), at most once per ``interval_s`` for each kind, with
    a count of the ones it suppressed; anything else goes to the default handler.

    :meth:`report` is the same for any expected failure a server counts (a failed
    handshake, a reset, a peer's protocol error). What an interval suppressed is
    written by the next report of its kind, or by :meth:`flush` (which
    :meth:`flush_forever` calls every interval), so no count is lost when a flood
    stops."""

    def __init__(self, log: Callable[[str], object], interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.interval_s, self.clock = log, interval_s, clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._message: dict[str, str] = {}  # the newest suppressed message of each kind
        self.counts: dict[str, int] = {}  # every report of each kind, written or not

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.set_exception_handler(self)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if not (is_resource_error(exc) or isinstance(exc, ConnectionError | TimeoutError)):
            loop.default_exception_handler(context)
            return
        assert isinstance(exc, OSError)
        kind = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        self.report(kind, f"{context.get('message', 'error')}: {kind}")

    def report(self, kind: str, message: str) -> None:
        """Log ``message`` now, or count it if one of ``kind`` was logged less than an
        interval ago."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            self._message[kind] = message
            return
        self._write(kind, message, now)

    def _write(self, kind: str, message: str, now: float) -> None:
        self._last[kind] = now
        self._message.pop(kind, None)
        left_out = self._suppressed.pop(kind, 0)
        more = f" ({left_out} more like it suppressed)" if left_out else ""
        self.log(f"{message}{more}")

    def flush(self, final: bool = False) -> None:
        """Write what was suppressed of each kind whose interval has passed (of
        every kind, if ``final``: the process is ending), as one line: the newest
        such message, with the count of the others."""
        now = self.clock()
        for kind in list(self._message):
            if final or now - self._last.get(kind, now) >= self.interval_s:
                self._suppressed[kind] -= 1  # the message written is one of them
                self._write(kind, self._message[kind], now)

    async def flush_forever(self) -> None:
        """:meth:`flush` every interval, until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s)
            self.flush()
