"""Send what the censor forges: RSTs and DNS answers, crafted with scapy.

Packets leave through a raw socket with the IP header included, so they can
carry the server's (or client's) address as their source, as an injecting
censor's do. They originate in the censor namespace's OUTPUT path, never its
FORWARD path, so the censor never queues its own forgeries.

One field a raw socket will not carry as given: Linux fills in an IPv4 ID of
zero on a packet without DF (raw(7)), and the GFW's type I injector sends
exactly that (docs/censors/blocking.md §5). Those packets go out on a packet
socket instead, framed for the next hop's MAC address from the kernel's
neighbour table, which the flow that drew them has just filled.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
from pathlib import Path
from typing import Any

from .actions import InjectTcp, InjectUdp


def craft(spec: InjectTcp | InjectUdp) -> bytes:
    """The wire bytes of one forged packet (checksums computed by scapy)."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6

    v6 = ipaddress.ip_address(spec.dst).version == 6
    ip: Any = (IPv6(src=spec.src, dst=spec.dst, hlim=spec.ttl) if v6
               else IP(src=spec.src, dst=spec.dst, ttl=spec.ttl))
    l4: TCP | UDP
    if isinstance(spec, InjectTcp):
        if not v6 and spec.ip_id is not None:
            ip.id = spec.ip_id
        if not v6:
            ip.flags = "DF" if spec.df else 0
        l4 = TCP(sport=spec.sport, dport=spec.dport, seq=spec.seq & 0xFFFFFFFF,
                 ack=spec.ack & 0xFFFFFFFF, flags=spec.flags, window=spec.window)
    else:
        l4 = UDP(sport=spec.sport, dport=spec.dport)
    return bytes(ip / l4 / spec.payload)


ETH_P_IP = 0x0800


def next_hop(dst: str) -> tuple[str, bytes] | None:
    """(interface, MAC) that an IPv4 packet to `dst` leaves by, or None if unknown."""
    try:
        route = json.loads(subprocess.run(["ip", "-j", "route", "get", dst], capture_output=True,
                                          text=True, timeout=5).stdout or "[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not route or "dev" not in route[0]:
        return None
    dev, hop = route[0]["dev"], route[0].get("gateway", dst)
    for line in Path("/proc/net/arp").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) >= 6 and f[0] == hop and f[5] == dev and f[3] != "00:00:00:00:00:00":
            return dev, bytes.fromhex(f[3].replace(":", ""))
    return None


def needs_link_layer(spec: InjectTcp | InjectUdp) -> bool:
    """Whether the kernel would rewrite this packet's IP ID on a raw socket."""
    return (isinstance(spec, InjectTcp) and spec.ip_id == 0 and not spec.df
            and ":" not in spec.dst)


class Injector:
    """Raw sockets (one per address family), opened once."""

    def __init__(self) -> None:
        self._socks: dict[int, socket.socket] = {}
        self._hops: dict[str, tuple[str, bytes] | None] = {}
        self._link: socket.socket | None = None
        self.sent = 0

    def _sock(self, family: int) -> socket.socket:
        s = self._socks.get(family)
        if s is None:
            s = socket.socket(family, socket.SOCK_RAW, socket.IPPROTO_RAW)
            self._socks[family] = s
        return s

    def warm(self) -> None:
        """Import scapy now, not on the first forgery: that import takes a few hundred
        ms, and the packet that drew the forgery waits for it (docs/lab/censor.md §5)."""
        craft(InjectTcp("192.0.2.1", "192.0.2.2", 1, 2, seq=0))

    def send(self, spec: InjectTcp | InjectUdp) -> int:
        data = craft(spec)
        if needs_link_layer(spec):
            if spec.dst not in self._hops:
                self._hops[spec.dst] = next_hop(spec.dst)
            hop = self._hops[spec.dst]
            if hop is not None:
                if self._link is None:
                    self._link = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM,
                                               socket.htons(ETH_P_IP))
                for _ in range(max(spec.count, 1)):
                    self._link.sendto(data, (hop[0], ETH_P_IP, 0, 0, hop[1]))
                    self.sent += 1
                return len(data)
            # No neighbour entry: the raw socket still sends it, with the kernel's ID.
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
        if self._link is not None:
            self._link.close()
            self._link = None
