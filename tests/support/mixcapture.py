"""A realistic mix of traffic as a capture, built deterministically from a seed.

Pcap mode's throughput goal is set on a mix like a real uplink's (issue 46): tens of
thousands of flows, interleaved, of TLS with the server's data, fully encrypted TCP
(FET-like: random first payloads), and QUIC, some of them naming blocked domains.
Nothing here is committed as a file: :func:`write_mix` writes the capture from its
seed in a second or two (packets built with struct, not scapy), and the benchmark
(benchmarks/censor.py) and the tests that compare pcap mode's paths read the same
bytes for the same seed.

Addresses: clients in 198.18.0.0/20 (and 2001:db8:1::/48), servers in 198.19.0.0/18
(and 2001:db8:2::/48); :data:`HOSTING` is the part of the servers a "listed hosting
range" profile (tspu-freeze-2025, range-block) is given. Blocked names end in
``blocked.lab``, and ``cloudflare-ech.com`` hellos carry ECH, so the SNI, QUIC and ECH
profiles each find some flows to act on.
"""

from __future__ import annotations

import ipaddress
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import quic_vectors

CLIENTS_V4, SERVERS_V4 = "198.18.0.0/20", "198.19.0.0/18"
CLIENTS_V6, SERVERS_V6 = "2001:db8:1::/48", "2001:db8:2::/48"
HOSTING = ["198.19.0.0/20", "2001:db8:2::/64"]  # a "listed range" for the profiles that need one
DOMESTIC = ["198.19.32.0/20"]  # Iran's domestic destinations, for iran-2026
ALLOWLISTED = ["198.18.0.0/22"]  # Iran's allowlisted sources, for iran-2026
BLOCKED_NAMES = ["blocked.lab"]

_ETH_V4 = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00"
_ETH_V6 = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x86\xdd"
SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01


@dataclass
class MixStats:
    packets: int = 0
    flows: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


def _ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack("!10H", header))
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


class _Builder:
    """Ethernet frames of IPv4/IPv6 TCP and UDP packets, fields set, checksums of
    the IPv4 header only (no censor here checks the others)."""

    def __init__(self) -> None:
        self.ip_id = 0

    def ip(self, src: bytes, dst: bytes, proto: int, l4: bytes) -> bytes:
        if len(src) == 4:
            self.ip_id = (self.ip_id + 1) & 0xFFFF
            head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), self.ip_id, 0x4000, 64,
                               proto, 0, src, dst)
            head = head[:10] + struct.pack("!H", _ip_checksum(head)) + head[12:]
            return _ETH_V4 + head + l4
        head = struct.pack("!IHBB16s16s", 0x60000000, len(l4), proto, 64, src, dst)
        return _ETH_V6 + head + l4

    def tcp(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int,
            flags: int, payload: bytes = b"") -> bytes:
        l4 = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                         5 << 4, flags, 64240, 0, 0) + payload
        return self.ip(src, dst, 6, l4)

    def udp(self, src: bytes, dst: bytes, sport: int, dport: int, payload: bytes) -> bytes:
        return self.ip(src, dst, 17, struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)
                       + payload)


def _tls_record(hello_msg: bytes) -> bytes:
    return b"\x16\x03\x01" + struct.pack("!H", len(hello_msg)) + hello_msg


class _Pools:
    """What flows draw from: addresses, names, and pre-built hellos and Initials
    (building each costs more than a flow's packets do)."""

    def __init__(self, rng: random.Random) -> None:
        c4, s4 = ipaddress.ip_network(CLIENTS_V4), ipaddress.ip_network(SERVERS_V4)
        c6, s6 = ipaddress.ip_network(CLIENTS_V6), ipaddress.ip_network(SERVERS_V6)
        self.clients4 = [c4[rng.randrange(2, c4.num_addresses - 1)].packed for _ in range(3000)]
        self.servers4 = [s4[rng.randrange(2, s4.num_addresses - 1)].packed for _ in range(4000)]
        self.clients6 = [c6[rng.randrange(2, 1 << 32)].packed for _ in range(200)]
        self.servers6 = [s6[rng.randrange(2, 1 << 32)].packed for _ in range(300)]
        names = [f"site{i}.example{i % 37}.lab" for i in range(400)]
        names += [f"www{i}.blocked.lab" for i in range(20)]  # about 1 in 20 names blocked
        self.hellos = []
        for i, name in enumerate(names):
            msg = quic_vectors.client_hello(name, ["h2", "http/1.1"], random.Random(i))
            self.hellos.append(_tls_record(msg))
        ech = quic_vectors.client_hello("cloudflare-ech.com", ["h2"], random.Random(1), ech=True)
        self.hellos.append(_tls_record(ech))
        self.initials = [quic_vectors.build_initial(
            f"q{i}.blocked.lab" if i % 20 == 0 else f"q{i}.example.lab", seed=i)
            for i in range(200)]


def write_mix(path: Path | str, seed: int = 46, flows: int = 27_600,
              span_s: float = 300.0) -> MixStats:
    """Write the mix as a classic pcap (Ethernet) and say what is in it.

    ``flows`` connections start over ``span_s`` seconds: 45 % TLS to port 443 (a
    handshake, a ClientHello, 1-14 server segments of 1,400 bytes, mostly few, an ACK,
    a FIN each way), 35 % FET-like TCP to a handful of ports (a random first payload
    of 64-1,000 bytes, an answer or two, an ACK, FINs; a client often returns to its
    server, so a residual block finds later flows), 20 % QUIC (a client Initial of
    1,200 bytes, then 2-6 datagrams each way). 5 % of flows are IPv6. At the defaults
    this is about 235,000 packets.
    """
    rng = random.Random(seed)
    pools = _Pools(rng)
    b = _Builder()
    events: list[tuple[float, int, bytes]] = []  # (time, order, frame)
    stats = MixStats()
    fet_ports = [8388, 9850, 1080, 2053, 30001]
    fet_pairs: dict[bytes, tuple[bytes, int]] = {}
    order = 0

    def emit(t: float, frame: bytes) -> None:
        nonlocal order
        events.append((t, order, frame))
        order += 1

    for _ in range(flows):
        v6 = rng.random() < 0.05
        client = rng.choice(pools.clients6 if v6 else pools.clients4)
        server = rng.choice(pools.servers6 if v6 else pools.servers4)
        cport = rng.randrange(32768, 61000)
        t = rng.uniform(0.0, span_s)
        rtt = rng.uniform(0.005, 0.08)
        kind = rng.choices(("tls", "fet", "quic"), (45, 35, 20))[0]
        stats.by_kind[kind] = stats.by_kind.get(kind, 0) + 1
        if kind == "quic":
            initial = rng.choice(pools.initials)
            emit(t, b.udp(client, server, cport, 443, initial))
            for k in range(rng.randrange(2, 7)):
                t += rtt / 2
                if k % 3 == 2:
                    data = rng.randbytes(rng.randrange(40, 300))
                    emit(t, b.udp(client, server, cport, 443, data))
                else:
                    data = rng.randbytes(rng.randrange(200, 1250))
                    emit(t, b.udp(server, client, 443, cport, data))
            continue
        if kind == "tls":
            sport, first = 443, rng.choice(pools.hellos)
        else:
            if client in fet_pairs and rng.random() < 0.6:
                server, sport = fet_pairs[client]
            else:
                sport = rng.choice(fet_ports)
                fet_pairs[client] = (server, sport)
            first = rng.randbytes(rng.randrange(64, 1000))
        cseq, sseq = rng.getrandbits(32), rng.getrandbits(32)
        emit(t, b.tcp(client, server, cport, sport, cseq, 0, SYN))
        t += rtt
        emit(t, b.tcp(server, client, sport, cport, sseq, cseq + 1, SYN | ACK))
        t += rtt / 2
        cseq += 1
        sseq += 1
        emit(t, b.tcp(client, server, cport, sport, cseq, sseq, ACK))
        emit(t + 0.0001, b.tcp(client, server, cport, sport, cseq, sseq, PSH | ACK, first))
        cseq += len(first)
        t += rtt
        if kind == "tls":  # most pages are small; a few run past 16 KB
            segments = min(14, 1 + int(rng.expovariate(1 / 2.5)))
        else:
            segments = rng.randrange(1, 3)
        for k in range(segments):
            size = 1400 if kind == "tls" else rng.randrange(40, 1400)
            flags = ACK | (PSH if k == segments - 1 else 0)
            emit(t, b.tcp(server, client, sport, cport, sseq, cseq, flags, rng.randbytes(size)))
            sseq += size
            t += 0.0005
        emit(t, b.tcp(client, server, cport, sport, cseq, sseq, ACK))
        t += rtt
        emit(t, b.tcp(client, server, cport, sport, cseq, sseq, FIN | ACK))
        emit(t + rtt / 2, b.tcp(server, client, sport, cport, sseq, cseq + 1, FIN | ACK))
    events.sort()
    stats.flows, stats.packets = flows, len(events)
    write_pcap(path, [(t, frame) for t, _, frame in events])
    return stats


#: Builds the frames of a capture by hand (tests with a known answer).
FrameBuilder = _Builder


def write_pcap(path: Path | str, frames: list[tuple[float, bytes]]) -> None:
    """A classic pcap (Ethernet) of ``frames``, (seconds from the start, frame), in order."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        rec = struct.Struct("<IIII")
        for t, frame in frames:
            sec = int(t)
            f.write(rec.pack(1_700_000_000 + sec, int((t - sec) * 1e6), len(frame), len(frame)))
            f.write(frame)
