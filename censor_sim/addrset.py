"""A set of address ranges that answers "is this address text in it?" fast.

Why: the censor asks it of every new server (an inspector's ``servers`` scope),
and pcap mode of every address it meets (the censored side, the kernel's lists).
``ipaddress`` parses an address in tens of microseconds; this turns the text
into an integer with ``socket.inet_pton`` and compares it with each range's
bounds, a microsecond or two, and remembers the answer per address.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

# Answers remembered; a busy uplink meets tens of thousands of addresses.
_MEMO = 1 << 16


class AddressSet:
    """The union of ``networks`` (CIDR texts or ipaddress networks)."""

    def __init__(self, networks: Iterable[str | ipaddress.IPv4Network | ipaddress.IPv6Network]
                 ) -> None:
        self.networks = [n if isinstance(n, ipaddress.IPv4Network | ipaddress.IPv6Network)
                         else ipaddress.ip_network(n, strict=False) for n in networks]
        self._v4 = [(int(n.network_address), int(n.broadcast_address))
                    for n in self.networks if n.version == 4]
        self._v6 = [(int(n.network_address), int(n.broadcast_address))
                    for n in self.networks if n.version == 6]
        self._memo: dict[str, bool] = {}

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __contains__(self, address: str) -> bool:
        hit = self._memo.get(address)
        if hit is None:
            if len(self._memo) >= _MEMO:
                self._memo.clear()
            hit = self._memo[address] = self._lookup(address)
        return hit

    def _lookup(self, address: str) -> bool:
        try:
            if ":" in address:
                value, ranges = int.from_bytes(socket.inet_pton(socket.AF_INET6, address),
                                               "big"), self._v6
            else:
                value, ranges = int.from_bytes(socket.inet_aton(address), "big"), self._v4
        except OSError:
            return False
        return any(lo <= value <= hi for lo, hi in ranges)
