"""The broker's waiting proxies and how clients are matched to them.

Tor's broker (``broker/snowflake-heap.go``, ``ipc.go``; docs/transports/snowflake.md §2.5)
keeps two min-heaps keyed on each proxy's reported client count, so the
least-loaded proxy is offered first: one for ``unrestricted`` proxies and one
for ``restricted`` and ``unknown`` ones. A restricted or unknown client can
only reach an unrestricted proxy; an unrestricted client is given a restricted
proxy first (they are the scarce kind's only partners) and, since Snowflake
2.8.0, an unrestricted one when none is left.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClientOffer:
    """What a matched proxy receives: the offer string, the client's NAT, the bridge."""

    offer: str
    nat: str
    fingerprint: str


@dataclass(eq=False)
class Snowflake:
    """One proxy poll waiting for a client (one long poll, one Sid)."""

    sid: str
    proxy_type: str
    nat: str
    clients: int
    offer: asyncio.Future[ClientOffer] = field(repr=False)
    answer: asyncio.Future[str] = field(repr=False)
    pooled: bool = True


class Pools:
    """The two heaps. Removal is lazy: an entry leaves when popped or when its
    ``pooled`` flag is cleared (the poll timed out or the proxy went away)."""

    def __init__(self, unknown_is_unrestricted: bool = False) -> None:
        # In a network with no NAT at all (the lab), a proxy whose NAT test could not
        # run is in fact unrestricted; Tor's broker must assume the worse case.
        self.unknown_is_unrestricted = unknown_is_unrestricted
        self._heaps: dict[str, list[tuple[int, int, Snowflake]]] = {
            "unrestricted": [], "restricted": []}
        self._seq = itertools.count()
        self.by_sid: dict[str, Snowflake] = {}

    def _pool(self, nat: str) -> str:
        if nat == "unrestricted" or (nat == "unknown" and self.unknown_is_unrestricted):
            return "unrestricted"
        return "restricted"

    def add(self, sf: Snowflake) -> None:
        self.by_sid[sf.sid] = sf
        # Ties go to the newest poll: the oldest is the nearest its timeout, and its
        # proxy the likeliest to be gone.
        heapq.heappush(self._heaps[self._pool(sf.nat)], (sf.clients, -next(self._seq), sf))

    def withdraw(self, sf: Snowflake) -> None:
        """The poll ended without a match: it can no longer be offered."""
        sf.pooled = False
        if self.by_sid.get(sf.sid) is sf and not sf.offer.done():
            del self.by_sid[sf.sid]

    def forget(self, sf: Snowflake) -> None:
        """The exchange is over (answered or timed out): the Sid is gone."""
        sf.pooled = False
        if self.by_sid.get(sf.sid) is sf:
            del self.by_sid[sf.sid]

    def _pop(self, pool: str) -> Snowflake | None:
        heap = self._heaps[pool]
        while heap:
            sf = heapq.heappop(heap)[2]
            if sf.pooled and not sf.offer.done():
                sf.pooled = False
                return sf
        return None

    def match(self, client_nat: str) -> Snowflake | None:
        """The least-loaded proxy this client may use, taken out of its pool."""
        if client_nat == "unrestricted":
            return self._pop("restricted") or self._pop("unrestricted")
        return self._pop("unrestricted")

    def available(self) -> Counter[tuple[str, str]]:
        """Waiting proxies by (type, NAT), for /debug and metrics."""
        return Counter((sf.proxy_type, sf.nat) for heap in self._heaps.values()
                       for _, _, sf in heap if sf.pooled and not sf.offer.done())
