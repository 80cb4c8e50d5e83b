"""Per-source rate limiting for the broker (Tor's broker has none;
docs/transports/snowflake.md §2.8).

A token bucket per source address: ``rate`` requests per second sustained,
``burst`` at once. Behind the lab's TLS edge every request comes from the
edge, so the source is then the address the edge appended to
``X-Forwarded-For``, and only when the request really comes from a trusted
edge address: a client cannot pick its own key by sending the header.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

Clock = Callable[[], float]


def source_address(remote: str | None, forwarded_for: str | None,
                   trusted: frozenset[str]) -> str:
    """The address to account a request to."""
    remote = remote or "unknown"
    if remote in trusted and forwarded_for:
        last = forwarded_for.split(",")[-1].strip()
        try:
            return str(ipaddress.ip_address(last))
        except ValueError:
            return remote  # a malformed header from the edge: charge the edge
    return remote


class RateLimiter:
    """Token buckets keyed by source; the least recently seen are evicted past
    ``max_sources``, so memory stays bounded under a flood of addresses."""

    def __init__(self, rate: float, burst: float, clock: Clock = time.monotonic,
                 max_sources: int = 100_000, trusted: Iterable[str] = ()) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate, self.burst, self.clock = rate, burst, clock
        self.max_sources = max_sources
        self.trusted = frozenset(trusted)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self.refused = 0

    def allow(self, key: str) -> bool:
        now = self.clock()
        tokens, last = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        ok = tokens >= 1
        if ok:
            tokens -= 1
        else:
            self.refused += 1
        self._buckets[key] = (tokens, now)
        if len(self._buckets) > self.max_sources:
            self._buckets.popitem(last=False)
        return ok

    def retry_after(self, key: str) -> float:
        tokens, _ = self._buckets.get(key, (self.burst, 0.0))
        return max(0.0, (1 - tokens) / self.rate)
