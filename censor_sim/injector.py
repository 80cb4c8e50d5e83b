"""Send what the censor forges: RSTs and DNS answers, crafted with scapy.

Packets leave through a raw socket with the IP header included, so they can
carry the server's (or client's) address as their source, as an injecting
censor's do. They originate in the censor namespace's OUTPUT path, never its
FORWARD path, so the censor never queues its own forgeries.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from .actions import InjectTcp, InjectUdp


def craft(spec: InjectTcp | InjectUdp) -> bytes:
    """The wire bytes of one forged packet (checksums computed by scapy)."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6

    v6 = ipaddress.ip_address(spec.dst).version == 6
    ip: Any = (IPv6(src=spec.src, dst=spec.dst, hlim=spec.ttl) if v6
               else IP(src=spec.src, dst=spec.dst, ttl=spec.ttl))
    if isinstance(spec, InjectTcp):
        if not v6 and spec.ip_id is not None:
            ip.id = spec.ip_id
        l4 = TCP(sport=spec.sport, dport=spec.dport, seq=spec.seq & 0xFFFFFFFF,
                 ack=spec.ack & 0xFFFFFFFF, flags=spec.flags, window=spec.window)
    else:
        l4 = UDP(sport=spec.sport, dport=spec.dport)
    return bytes(ip / l4 / spec.payload)


class Injector:
    """Raw sockets (one per address family), opened once."""

    def __init__(self) -> None:
        self._socks: dict[int, socket.socket] = {}
        self.sent = 0

    def _sock(self, family: int) -> socket.socket:
        s = self._socks.get(family)
        if s is None:
            s = socket.socket(family, socket.SOCK_RAW, socket.IPPROTO_RAW)
            self._socks[family] = s
        return s

    def send(self, spec: InjectTcp | InjectUdp) -> int:
        data = craft(spec)
        family = socket.AF_INET6 if ":" in spec.dst else socket.AF_INET
        s = self._sock(family)
        for _ in range(max(spec.count, 1)):
            s.sendto(data, (spec.dst, 0))
            self.sent += 1
        return len(data)

    def close(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()
