"""What the bridge holds for its clients, in all, and each stream's share of it
(docs/transports/budgets.md §2.1; issue 48).

A client that never reads makes the bridge hold what its upstream sends: the
stream's write queue, the bytes KCP keeps until they are acknowledged, the
packets waiting for a WebSocket and the message being written to it. One
operator option, ``client-buffer``, caps all of that across every session:

* :class:`Meter` counts one holder's bytes and passes each change up: a
  stream's or a WebSocket's to its session, a session's to the bridge;
* a stream's *share* is the budget over the open streams, never less than the
  budget over the stream cap (so every stream the cap admits gets one) and
  never more than :data:`MAX_SHARE`. A session may hold the shares of its open
  streams (one, if it has none); past that its KCP conversation takes no more
  bytes, its streams' write queues fill, and their upstreams are no longer read:
  backpressure to the upstream's TCP window, nothing dropped;
* when the budget is spent and a session below its share needs room,
  :meth:`ClientBuffer.relieve` closes the session whose client has acknowledged
  nothing for the longest, if that is at least ``stall_s``: a reading client
  acknowledges within a round trip, so it is never the one closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol

from transports.common.budget import CLIENT_BUFFER

MiB = 1 << 20
#: The budget by default (transports/common/budget.py, docs/transports/budgets.md §2.1).
DEFAULT_CLIENT_BUFFER = CLIENT_BUFFER
#: No stream needs more at once: Snowflake's client announces a 1 MiB smux window
#: (docs/transports/turbotunnel.md §4.3), and a share bounds what is in flight.
MAX_SHARE = 2 * MiB
#: The smallest share the stream cap may leave (the cap is lowered to keep it). A
#: stream must always be able to move its queued write into KCP while its
#: upstream's read side (48 KiB, transports/common/upstream.py) and its write queue
#: (one relay read, 64 KiB at most) are full, and the write stays counted in the
#: queue until smux has taken both of its 32 KiB frames (34 KiB each in whole KCP
#: segments): 48 + 64 + 2 x 34 = 180 KiB, rounded up.
MIN_SHARE = 192 * 1024
#: How long a session holding bytes must have had nothing acknowledged before
#: :meth:`ClientBuffer.relieve` may close it.
STALL_S = 5.0
#: After a look for a stalled session that found none, how long until the next:
#: every blocked writer asks at each KCP tick, and a look goes through every session.
RELIEF_PAUSE_S = 0.1


class Meter:
    """Bytes one holder keeps; every change also counts in its parent's."""

    __slots__ = ("bytes", "parent")

    def __init__(self, parent: Meter | None = None) -> None:
        self.bytes = 0
        self.parent = parent

    def add(self, n: int) -> None:
        meter: Meter | None = self
        while meter is not None:
            meter.bytes += n
            meter = meter.parent

    def set(self, n: int) -> None:
        """This holder now keeps ``n`` bytes."""
        if n != self.bytes:
            self.add(n - self.bytes)

    def clear(self) -> None:
        self.set(0)


class Holder(Protocol):
    """A session, as :meth:`ClientBuffer.relieve` sees it."""

    @property
    def held(self) -> int: ...
    def stalled_for(self, now: float) -> float: ...
    def end(self, why: str) -> None: ...


def stream_cap(total: int, max_streams: int) -> int:
    """``max_streams``, lowered so that each stream keeps at least MIN_SHARE of
    ``total``: the budget, not only the descriptors, bounds the open streams."""
    return max(1, min(max_streams, total // MIN_SHARE))


class ClientBuffer:
    """The bridge's budget for bytes held for clients, and the streams' shares of it."""

    def __init__(self, total: int, max_streams: int, *, stall_s: float = STALL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if total < MIN_SHARE:
            raise ValueError(f"client-buffer must be at least {MIN_SHARE} bytes")
        self.total = total
        self.max_streams = stream_cap(total, max_streams)
        self.floor = max(MIN_SHARE, min(MAX_SHARE, total // self.max_streams))
        self.stall_s = stall_s
        self.clock = clock
        self.meter = Meter()
        self.open_streams = 0
        self.relieved = 0
        self.peak = 0
        self._next_look = 0.0

    @property
    def used(self) -> int:
        return self.meter.bytes

    def share(self) -> int:
        """What one stream may hold now."""
        return max(self.floor, min(MAX_SHARE, self.total // max(1, self.open_streams)))

    def allowance(self, streams: int) -> int:
        """What a session with ``streams`` open streams may hold."""
        return self.share() * max(1, streams)

    def room(self, n: int) -> bool:
        """Whether ``n`` more bytes fit in the budget."""
        self.peak = max(self.peak, self.meter.bytes)
        return self.meter.bytes + n <= self.total

    def relieve(self, sessions: Iterable[Holder], needy: object) -> bool:
        """The budget is spent and ``needy`` needs room: end the session that holds
        bytes and has had nothing acknowledged for the longest, if for at least
        ``stall_s``; whether one was ended."""
        now = self.clock()
        if now < self._next_look:
            return False
        victim, longest = None, self.stall_s
        for s in sessions:
            if s is needy or s.held <= 0:
                continue
            stalled = s.stalled_for(now)
            if stalled >= longest:
                victim, longest = s, stalled
        if victim is None:
            self._next_look = now + RELIEF_PAUSE_S
            return False
        self.relieved += 1
        victim.end("client-buffer spent; its client acknowledged nothing for "
                   f"{longest:.0f} s")
        return True
