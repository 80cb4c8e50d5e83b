"""One receive budget shared by every client's SCTP association.

aiortc advertises a fixed 1 MiB receive window on each association, whatever
the proxy can process. One client never fills it. With twenty uploading at
once, each pion sender keeps its whole window in flight, and the proxy's one
thread drains them all: measured with 20 clients in the lab, about 20 MiB sat
in the proxy's socket buffers, and the SCTP round trip grew to 10 s, which
every timer above it (KCP's, ICE consent's) then saw
(benchmarks/snowflake_clients.py; docs/transports/snowflake.md §3.8).

So the proxy shares one budget: each association advertises
``budget / clients``, within ``[floor, ceiling]``, and the share is set again
whenever a client comes or goes. A smaller advertised window is always allowed
(RFC 9260 §6.2.1), and a lone client still gets aiortc's full 1 MiB. The
window is aiortc's private ``_advertised_rwnd``, read when each SACK is built;
the tests pin it.
"""

from __future__ import annotations

from typing import Any

BUDGET = 2 << 20  # bytes in flight toward the proxy, all clients together
FLOOR = 64 << 10
CEILING = 1 << 20  # aiortc's own window


class SharedReceiveWindow:
    """The associations of the clients being served, and the share each advertises."""

    def __init__(self, budget: int = BUDGET, floor: int = FLOOR,
                 ceiling: int = CEILING) -> None:
        if not 0 < floor <= ceiling:
            raise ValueError(f"need 0 < floor <= ceiling, got {floor} and {ceiling}")
        self.budget, self.floor, self.ceiling = budget, floor, ceiling
        self._members: list[Any] = []

    def share(self) -> int:
        """What each association advertises now."""
        n = max(1, len(self._members))
        return max(self.floor, min(self.ceiling, self.budget // n))

    def join(self, sctp: Any) -> None:
        if sctp is not None and sctp not in self._members:
            self._members.append(sctp)
            self._apply()

    def leave(self, sctp: Any) -> None:
        if sctp in self._members:
            self._members.remove(sctp)
            self._apply()

    def _apply(self) -> None:
        window = self.share()
        for sctp in self._members:
            sctp._advertised_rwnd = window
