"""Packets and a clock for driving the censor's engine by hand, with no network."""

from __future__ import annotations

from censor_sim import packet
from censor_sim.engine import Engine
from censor_sim.packet import ACK, PSH, SYN, Packet

CLIENT, SERVER = "198.18.0.2", "198.18.5.2"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def tcp(src, dst, sport, dport, flags, payload=b"", seq=1000, ack=5000) -> Packet:
    return Packet(b"", 4, src, dst, packet.TCP, 64, 0, 20, sport, dport, seq, ack, flags, 5,
                  8192, 0, payload)


def udp(src, dst, sport, dport, payload) -> Packet:
    return Packet(b"", 4, src, dst, packet.UDP, 64, 0, 20, sport, dport, payload=payload)


def connect(engine: Engine, cport: int, sport: int, first: bytes, server: str = SERVER,
            client: str = CLIENT):
    """A handshake and one client payload; the verdict of the payload packet."""
    v = engine.handle(tcp(client, server, cport, sport, SYN), True)
    if v.drop:
        return v
    engine.handle(tcp(server, client, sport, cport, SYN | ACK), False)
    engine.handle(tcp(client, server, cport, sport, ACK), True)
    return engine.handle(tcp(client, server, cport, sport, PSH | ACK, first), True)
