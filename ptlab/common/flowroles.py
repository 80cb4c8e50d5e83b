"""Whose flow a censor event is about: the transport's, a benign class's, or a probe's.

The censor reports every detection with the flow's addresses and ports. A cell
has more than the transport on the wire (the benign mix runs beside it, the
prober connects to suspected servers), so a detection is only the transport's
when its flow is. The runner knows the flows it opened itself: the benign
workload binds its sockets to :data:`BENIGN_PORTS`, above the kernel's ephemeral
range that every other client socket draws from (netns sets it per namespace),
and its destinations say which class each is. The prober's flows come from the
prober node's addresses and source pool. Flows from the client to the lab's
resolver and STUN server, from ports the benign mix does not use, are lab
infrastructure. What is left from the client is the transport
(docs/lab/results.md §3).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from netns.lab import EPHEMERAL_PORTS

#: Source ports the benign workload binds: above the ephemeral range, so no
#: transport client socket can have one.
BENIGN_PORTS = range(EPHEMERAL_PORTS[1] + 1, 65535)  # 61000-65534: ip rule refuses 65535

TCP, UDP = 6, 17
TRANSPORT, PROBE, INFRA, OTHER = "transport", "probe", "infra", "other"


def benign_role(kind: str) -> str:
    return f"benign:{kind}"


@dataclass(frozen=True)
class FlowRoles:
    """Classifies a censor event's flow (``{"client", "server", "proto", "client_port",
    "server_port"}``) by who opened it."""

    client_addresses: frozenset[str]
    #: (proto, server address, server port) -> benign class, e.g. (6, "198.18.5.2", 22): "ssh"
    benign: dict[tuple[int, str, int], str] = field(default_factory=dict)
    #: Benign destinations no transport uses; their flows are benign whatever the source port
    #: (SSH runs as the OpenSSH client, which cannot be told a source port).
    benign_only: frozenset[tuple[int, str, int]] = frozenset()
    prober_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    #: The lab's own services a client process may use on the way (its DNS
    #: resolver, its STUN server): their flows are lab infrastructure.
    infrastructure: frozenset[tuple[int, str, int]] = frozenset()

    @classmethod
    def build(cls, client_addresses: Iterable[str], benign: dict[tuple[int, str, int], str],
              benign_only: Iterable[tuple[int, str, int]] = (),
              prober: Iterable[str] = (),
              infrastructure: Iterable[tuple[int, str, int]] = ()) -> FlowRoles:
        return cls(frozenset(_norm(a) for a in client_addresses),
                   {(p, _norm(a), port): k for (p, a, port), k in benign.items()},
                   frozenset((p, _norm(a), port) for p, a, port in benign_only),
                   tuple(ipaddress.ip_network(n, strict=False) for n in prober),
                   frozenset((p, _norm(a), port) for p, a, port in infrastructure))

    def role_of(self, flow: dict[str, Any] | None) -> str:
        """transport, benign:<class>, probe, infra or other."""
        if not flow:
            return OTHER
        client, server = _norm(flow.get("client")), _norm(flow.get("server"))
        if self._is_prober(client) or self._is_prober(server):
            return PROBE
        port = flow.get("server_port")
        # Ports are integers in every event; anything else matches no key.
        dest = (_proto(flow.get("proto")), server, port if isinstance(port, int) else -1)
        kind = self.benign.get(dest)
        if kind is not None and (flow.get("client_port") in BENIGN_PORTS
                                 or dest in self.benign_only):
            return benign_role(kind)
        if dest in self.infrastructure:
            return INFRA
        if client in self.client_addresses:
            return TRANSPORT
        return OTHER

    def _is_prober(self, addr: str) -> bool:
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            return False
        return any(ip.version == n.version and ip in n for n in self.prober_networks)


def _norm(addr: Any) -> str:
    """One spelling per address (IPv6 has several)."""
    try:
        return str(ipaddress.ip_address(addr))
    except ValueError:
        return str(addr)


def _proto(p: Any) -> int:
    if isinstance(p, str):
        return {"tcp": TCP, "udp": UDP}.get(p.lower(), -1)
    return int(p) if p is not None else -1
