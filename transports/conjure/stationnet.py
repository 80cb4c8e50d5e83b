"""The station's datapath in the ISP's namespace: nftables for the phantom subnets.

Conjure's station taps the ISP's traffic and forwards a registered client's
packets for its phantom into a local application (DNAT to the application's
port; it recovers the phantom with ``SO_ORIGINAL_DST``, docs/transports/conjure.md §5.1).
In the lab the ISP node owns the whole range (a local route), so without rules
its own stack would answer for every phantom. The table ``ptlconjure``:

* ``prerouting`` (dstnat): (client, phantom, port) in ``reg4``, or (phantom,
  port) in ``reg6``, is DNATed to the station's listener;
* ``silence`` (prerouting, after DNAT) and ``output``: anything else for the
  phantom subnets is dropped, so probes see no SYN-ACK, no RST and no ICMP,
  exactly as for unused space, and the station's own liveness probes cannot
  reach its local stack.

Registrations come and go as set elements (:meth:`StationNet.allow`,
:meth:`StationNet.revoke`).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import subprocess
from collections.abc import Sequence

TABLE = "ptlconjure"
SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h; IP6T_SO_ORIGINAL_DST has the same value


class StationNetError(RuntimeError):
    pass


def _nft(script: str) -> None:
    proc = subprocess.run(["nft", "-f", "-"], input=script, text=True, capture_output=True,
                          check=False)
    if proc.returncode != 0:
        raise StationNetError(f"nft: {proc.stderr.strip() or proc.returncode}")


class StationNet:
    """The ``ptlconjure`` table for one set of phantom subnets and one listener."""

    def __init__(self, phantom_subnets: Sequence[str], listen4: tuple[str, int],
                 listen6: tuple[str, int] | None = None) -> None:
        nets = [ipaddress.ip_network(s, strict=False) for s in phantom_subnets]
        self.v4 = [str(n) for n in nets if n.version == 4]
        self.v6 = [str(n) for n in nets if n.version == 6]
        self.listen4, self.listen6 = listen4, listen6

    def ruleset(self) -> str:
        def elements(xs: list[str]) -> str:
            return f"elements = {{ {', '.join(xs)} }}" if xs else ""

        l4 = f"{self.listen4[0]}:{self.listen4[1]}"
        lines = [
            f"table inet {TABLE} {{",
            f"  set phantoms4 {{ type ipv4_addr; flags interval; {elements(self.v4)} }}",
            f"  set phantoms6 {{ type ipv6_addr; flags interval; {elements(self.v6)} }}",
            "  set reg4 { type ipv4_addr . ipv4_addr . inet_service; }",
            "  set reg6 { type ipv6_addr . inet_service; }",
            "  chain prerouting { type nat hook prerouting priority dstnat; policy accept;",
            f"    ip saddr . ip daddr . tcp dport @reg4 dnat ip to {l4}",
        ]
        if self.listen6:
            lines.append(f"    ip6 daddr . tcp dport @reg6 dnat ip6 to "
                         f"[{self.listen6[0]}]:{self.listen6[1]}")
        lines += [
            "  }",
            "  chain silence { type filter hook prerouting priority 0; policy accept;",
            "    ip daddr @phantoms4 drop",
            "    ip6 daddr @phantoms6 drop",
            "  }",
            "  chain output { type filter hook output priority 0; policy accept;",
            "    ip daddr @phantoms4 drop",
            "    ip6 daddr @phantoms6 drop",
            "  }",
            "}",
        ]
        return "\n".join(lines) + "\n"

    def install(self) -> None:
        _nft(f"table inet {TABLE}\ndelete table inet {TABLE}\n" + self.ruleset())

    def remove(self) -> None:
        _nft(f"table inet {TABLE}\ndelete table inet {TABLE}\n")

    @staticmethod
    def _element(client: str, phantom: str, port: int) -> tuple[str, str]:
        p = ipaddress.ip_address(phantom)
        if p.version == 6:
            return "reg6", f"{p} . {port}"
        return "reg4", f"{ipaddress.ip_address(client)} . {p} . {port}"

    def allow(self, client: str, phantom: str, port: int) -> None:
        name, element = self._element(client, phantom, port)
        _nft(f"add element inet {TABLE} {name} {{ {element} }}\n")

    def revoke(self, client: str, phantom: str, port: int) -> None:
        name, element = self._element(client, phantom, port)
        try:
            _nft(f"delete element inet {TABLE} {name} {{ {element} }}\n")
        except StationNetError:
            pass  # already gone (two registrations can share an element)


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """The address a DNATed connection was sent to (the phantom and its port)."""
    if sock.family == socket.AF_INET6:
        raw = sock.getsockopt(socket.IPPROTO_IPV6, SO_ORIGINAL_DST, 28)
        port = struct.unpack_from("!H", raw, 2)[0]
        return str(ipaddress.IPv6Address(raw[8:24])), port
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port = struct.unpack_from("!H", raw, 2)[0]
    return socket.inet_ntoa(raw[4:8]), port
