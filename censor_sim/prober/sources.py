"""Where probes come from: a pool of source addresses, one drawn per connection.

The GFW's probes do not come from one machine. Ensafi et al. (IMC 2015,
docs/censors/probing.md §1.3) saw probes for Tor, obfs2/3 and VPNs from thousands of
Chinese source addresses, most of them used only once or a few times; Alice
et al. (IMC 2020, docs/censors/probing.md §2.2) counted over 12,000 distinct prober IPs against
Shadowsocks. A server that allowlists or rate-limits by source address can
therefore not tell probes from clients, and a lab prober that always used one
address would make defences look better than they are.

In the lab the prober node owns whole prefixes (a topology extension: a
``local`` route on its loopback, and routes to it everywhere else), so it can
bind any address in them without configuring each one. :class:`SourcePool`
hands out a seeded-random host address per probe connection.
"""

from __future__ import annotations

import ipaddress
import random
import socket
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
SMALL = 1 << 16  # prefixes up to this many hosts hand out every address once per round
IPV6_FREEBIND = 78  # linux/in6.h (Linux 4.15 and later)


class SourcePool:
    """Random source addresses from the given prefixes (one per address family).

    ``factory(family)`` has the :data:`~censor_sim.prober.observe.SockFactory`
    shape: it returns an unconnected TCP socket bound to a fresh address of that
    family (port chosen by the kernel), or an unbound one when the pool has no
    prefix of that family. Every address handed out is appended to ``used``.
    """

    def __init__(self, prefixes: Iterable[str], seed: int = 0) -> None:
        self.nets: dict[int, Network] = {}
        for text in prefixes:
            try:
                net = ipaddress.ip_network(text.strip(), strict=True)
            except ValueError as exc:
                raise ValueError(f"source pool: {exc}") from None
            fam = socket.AF_INET if net.version == 4 else socket.AF_INET6
            if fam in self.nets:
                raise ValueError(f"source pool: two IPv{net.version} prefixes "
                                 f"({self.nets[fam]} and {net}); give one per family")
            if net.num_addresses < 4:
                raise ValueError(f"source pool: {net} is too small to be a pool")
            self.nets[fam] = net
        self.rng = random.Random(seed)
        self._order: dict[int, list[int]] = {}
        self.used: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.nets)

    def pick(self, family: int) -> str | None:
        """A host address of ``family`` (never the network or broadcast address).

        A small prefix is walked in a seeded random order, so no address repeats
        until all were used (as most real prober addresses are seen once); a
        large one (an IPv6 /64) is sampled, where a repeat is vanishingly rare.
        """
        net = self.nets.get(family)
        if net is None:
            return None
        hosts = net.num_addresses - 2
        if hosts <= SMALL:
            order = self._order.get(family)
            if not order:
                order = self._order[family] = self.rng.sample(range(1, hosts + 1), hosts)
            offset = order.pop()
        else:
            offset = self.rng.randrange(1, min(hosts, 1 << 64))
        addr = str(net.network_address + offset)
        self.used.append(addr)
        return addr

    def factory(self, family: int) -> socket.socket:
        sock = socket.socket(family, socket.SOCK_STREAM)
        addr = self.pick(family)
        if addr is not None:
            try:
                if family == socket.AF_INET6:
                    # IPv4 binds any address of a local route; IPv6 checks that the
                    # address is configured unless the socket may bind freely.
                    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FREEBIND, 1)
                sock.bind((addr, 0))
            except OSError as exc:
                sock.close()
                raise OSError(exc.errno, f"cannot bind probe source {addr}: {exc.strerror}"
                              " (does this node own the pool's prefix?)") from None
        return sock
