"""The GFW's unconditional port-443 RST injection of 2025-08-20.

Between about 00:34 and 01:48 (UTC+8) on 2025-08-20 the Great Firewall
reset every TCP connection to port 443 crossing the border, whatever it
carried (GFW Report, "Analysis of the GFW's Unconditional Port 443 Block on
August 20, 2025"; docs/censors/blocking.md §6):

* ports 22, 80 and 8443 (and 1–72, 444) were left alone: 443 only;
* a connection opened from inside China drew three RST+ACKs on its SYN
  (relative sequence number 0, windows 1980, 1981, 1982) and three more on the
  server's SYN+ACK (relative sequence number 1, windows 3293, 3294, 3295);
* a connection opened from outside drew them only on the inside server's
  SYN+ACK; its SYN drew nothing.

The measurements were taken at the client, which received the RSTs; whether
the server got any is not recorded, so these go to the connection's
initiator only. The report gives no TTL or IP ID pattern we could verify;
the forged packets keep the lab's defaults.

It judges packets one at a time, needing no flow state, so it is a *packet
censor* (docs/lab/censor.md §6): ``process(pkt, from_client)`` returns the
verdict, and every injection is appended to ``detections``.
"""

from __future__ import annotations

from typing import Any

from ..actions import InjectTcp, Verdict
from ..packet import ACK, FIN, RST, SYN, Packet

PORTS = (443,)
SYN_WINDOWS = (1980, 1981, 1982)
SYNACK_WINDOWS = (3293, 3294, 3295)


def injections(pkt: Packet, from_client: bool, ports: tuple[int, ...] = PORTS) -> list[InjectTcp]:
    """The RST+ACKs this packet draws: to the connection's initiator, forged from
    the server it called."""
    if not pkt.is_tcp:
        return []
    handshake = pkt.flags & (SYN | ACK | RST | FIN)
    if handshake == SYN and from_client and pkt.dport in ports:
        # Relative sequence number 0 at the client: the injector knows no server ISN.
        return [InjectTcp(pkt.dst, pkt.src, pkt.dport, pkt.sport, seq=0, ack=pkt.seq + 1,
                          flags="RA", window=w) for w in SYN_WINDOWS]
    if handshake == SYN | ACK and pkt.sport in ports:
        # As the server's next segment would be numbered: relative sequence number 1.
        return [InjectTcp(pkt.src, pkt.dst, pkt.sport, pkt.dport, seq=pkt.seq + 1,
                          ack=pkt.ack, flags="RA", window=w) for w in SYNACK_WINDOWS]
    return []


class Gfw443Rst:
    """``kind = "gfw_443_rst"``: ``ports`` (default [443]) are the ones reset."""

    kind = "gfw_443_rst"
    whole_packets = True

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        self.name = name
        self.ports = tuple(int(p) for p in params.get("ports", PORTS))
        self.detections: list[dict[str, Any]] = []

    def ignores(self, proto: int, flags: int, from_client: bool) -> bool:
        """Whether :meth:`process` surely does nothing with such a packet: only SYNs
        and SYN+ACKs draw RSTs (the engine then skims it: Engine.skim)."""
        return proto != 6 or flags & (SYN | ACK | RST | FIN) not in (SYN, SYN | ACK)

    def process(self, pkt: Packet, from_client: bool) -> Verdict:
        inject = injections(pkt, from_client, self.ports)
        if inject:
            self.detections.append({
                "rule": "syn" if pkt.flags & ACK == 0 else "syn+ack",
                "from": "inside" if from_client else "outside",
                "port": pkt.dport if pkt.flags & ACK == 0 else pkt.sport,
                "windows": [i.window for i in inject]})
        return Verdict(inject=list(inject))  # a list of Verdict's type, which holds UDP too
