"""One flow of the censor's flow table, fed packet by packet, for inspector tests.

Inspectors judge a :class:`censor_sim.flows.Flow` as the engine builds it; this feeds
the same ``FlowTable.record`` the engine uses, on a fixed clock, so a test can show an
inspector a flow's packets one at a time without a network or an engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from censor_sim import packet
from censor_sim.flows import Flow, FlowTable
from censor_sim.packet import ACK, PSH, Packet

CLIENT, SERVER = "198.18.0.2", "198.18.5.2"


@dataclass
class FedFlow:
    proto: int
    client_port: int = 40000
    server_port: int = 1194
    table: FlowTable = field(default_factory=lambda: FlowTable(lambda: 1000.0))
    flow: Flow | None = None
    seq: dict[bool, int] = field(default_factory=lambda: {True: 1000, False: 9000})

    def packet(self, c2s: bool, payload: bytes) -> Packet:
        src, dst = (CLIENT, SERVER) if c2s else (SERVER, CLIENT)
        sport, dport = ((self.client_port, self.server_port) if c2s
                        else (self.server_port, self.client_port))
        if self.proto == packet.UDP:
            return Packet(b"", 4, src, dst, packet.UDP, 64, 0, 20, sport, dport,
                          payload=payload)
        seq = self.seq[c2s]
        self.seq[c2s] = (seq + len(payload)) % (1 << 32)  # in order, no loss
        return Packet(b"", 4, src, dst, packet.TCP, 64, 0, 20, sport, dport, seq,
                      self.seq[not c2s], PSH | ACK, 5, 8192, 0, payload)

    def add(self, c2s: bool, payload: bytes) -> Packet:
        """Record one packet in the flow, as the engine would, and return it."""
        pkt = self.packet(c2s, payload)
        flow, _ = self.table.lookup(pkt, c2s)
        self.flow = flow
        self.table.record(flow, pkt, c2s)
        return pkt


def udp_flow(server_port: int = 1194) -> FedFlow:
    return FedFlow(packet.UDP, server_port=server_port)


def tcp_flow(server_port: int = 1194) -> FedFlow:
    return FedFlow(packet.TCP, server_port=server_port)
