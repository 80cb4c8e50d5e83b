"""A bounded, time-limited memory of handshake MACs, so a recorded handshake cannot be replayed.

An active prober that replays a captured client handshake would otherwise get a
server response and learn that the address runs obfs4.  Like obfs4proxy's
``common/replayfilter``, this stores a keyed SipHash-2-4 digest of each MAC_C
(8 bytes instead of the full value, under a per-process random key so digests
cannot be precomputed), forgets entries after ``ttl`` seconds, caps its size
(evicting the oldest entry when full), and clears itself if time runs backwards.
The filter is in memory only: a restart forgets it, as obfs4proxy's does.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from siphash24 import siphash24

DEFAULT_TTL = 3 * 3600.0
# A safeguard against runaway growth, far above what a busy bridge sees in a
# TTL window; the same cap as obfs4proxy.
MAX_ENTRIES = 100 * 1024


class ReplayFilter:
    """Answers "was this byte string seen in the last ``ttl`` seconds?" and records it."""

    def __init__(
        self,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._max_entries = max_entries
        self._key = os.urandom(16)
        # digest -> first-seen time; insertion order is age order, so the eldest
        # entry is always first and compaction only ever looks at the front.
        self._seen: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def test_and_set(self, buf: bytes, now: float | None = None) -> bool:
        """Return True if ``buf`` was already recorded; otherwise record it and return False."""
        if now is None:
            now = self._clock()
        digest = siphash24(buf, key=self._key).digest()
        with self._lock:
            self._compact(now)
            if digest in self._seen:
                return True
            self._seen[digest] = now
            return False

    def _compact(self, now: float) -> None:
        """Drop expired entries, and the eldest ones if full (to make room for one more)."""
        while self._seen:
            first_seen = next(iter(self._seen.values()))
            if len(self._seen) < self._max_entries and self._ttl > 0:
                if now < first_seen:
                    # The clock jumped backwards, perhaps far: no age can be
                    # trusted any more, so forget everything rather than keep
                    # entries alive for an unknown time.
                    self._seen.clear()
                    return
                if now - first_seen < self._ttl:
                    return
            self._seen.popitem(last=False)
