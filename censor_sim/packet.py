"""Fast header parsing of the packets NFQUEUE hands the censor.

The per-packet hot path cannot afford scapy's dissection (tens of µs per
packet), so this reads the few fields a censor decides on straight from the
bytes: addresses, ports, TCP flags/seq/ack/data offset, TTL and the payload.
Scapy is used where its fidelity matters: crafting what the censor injects
(``censor_sim.actions``) and detectors that reproduce scapy-based censors.

Only the first fragment of a fragmented IPv4 datagram carries ports; later
fragments parse with ``fragment=True`` and no L4 fields, as a real
middlebox without reassembly sees them.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

TCP, UDP = 6, 17
FIN, SYN, RST, PSH, ACK, URG = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20

_IP6_EXT = {0, 43, 60}  # hop-by-hop, routing, destination options: skipped


@dataclass(slots=True)
class Packet:
    """One IP packet as the censor sees it. Ports are 0 for non-TCP/UDP."""

    raw: bytes
    version: int
    src: str
    dst: str
    proto: int
    ttl: int
    ip_id: int
    l4_offset: int
    sport: int = 0
    dport: int = 0
    seq: int = 0
    ack: int = 0
    flags: int = 0
    dataofs: int = 0
    window: int = 0
    checksum: int = 0
    payload: bytes = b""
    fragment: bool = False

    @property
    def is_tcp(self) -> bool:
        return self.proto == TCP and not self.fragment

    @property
    def is_udp(self) -> bool:
        return self.proto == UDP and not self.fragment

    def has(self, flags: int) -> bool:
        return self.flags & flags == flags

    @property
    def pure_syn(self) -> bool:
        # Written out (not through is_tcp): asked of every packet the engine sees.
        return self.proto == TCP and not self.fragment and self.flags & 0x17 == SYN

    def tcp_checksum_ok(self) -> bool:
        """Whether the TCP/UDP checksum verifies. Censors that skip this check
        (most of Geneva's) can be desynchronised by packets with a bad one."""
        seg = self.raw[self.l4_offset:]
        addrs = ipaddress.ip_address(self.src).packed + ipaddress.ip_address(self.dst).packed
        if self.version == 4:
            pseudo = addrs + struct.pack("!BBH", 0, self.proto, len(seg))
        else:
            pseudo = addrs + struct.pack("!IxxxB", len(seg), self.proto)
        return internet_checksum(pseudo + seg) == 0

    def flow_tuple(self) -> tuple[str, str, int, int, int]:
        return (self.src, self.dst, self.proto, self.sport, self.dport)


def internet_checksum(data: bytes) -> int:
    """RFC 1071 one's-complement sum; 0 over data that includes a valid checksum."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def parse(raw: bytes) -> Packet | None:
    """Parse an IPv4 or IPv6 packet; None if it is too short to be one."""
    if not raw:
        return None
    version = raw[0] >> 4
    if version == 4:
        return _parse4(raw)
    if version == 6:
        return _parse6(raw)
    return None


def _parse4(raw: bytes) -> Packet | None:
    if len(raw) < 20:
        return None
    ihl = (raw[0] & 0x0F) * 4
    total = struct.unpack_from("!H", raw, 2)[0]
    if ihl < 20 or len(raw) < ihl:
        return None
    raw = raw[:total] if 0 < total <= len(raw) else raw
    ip_id, frag = struct.unpack_from("!HH", raw, 4)
    pkt = Packet(raw, 4, _ntoa4(raw[12:16]), _ntoa4(raw[16:20]), raw[9], raw[8], ip_id, ihl)
    pkt.fragment = (frag & 0x1FFF) != 0
    if not pkt.fragment:
        _parse_l4(pkt)
    return pkt


def _parse6(raw: bytes) -> Packet | None:
    if len(raw) < 40:
        return None
    plen = struct.unpack_from("!H", raw, 4)[0]
    raw = raw[:40 + plen] if 40 + plen <= len(raw) else raw
    nxt, off = raw[6], 40
    fragment = False
    while nxt in _IP6_EXT or nxt == 44:
        if len(raw) < off + 8:
            return None
        if nxt == 44:  # fragment header: only offset 0 carries the L4 header
            fragment = (struct.unpack_from("!H", raw, off + 2)[0] >> 3) != 0
            nxt, off = raw[off], off + 8
        else:
            nxt, off = raw[off], off + (raw[off + 1] + 1) * 8
    pkt = Packet(raw, 6, str(ipaddress.IPv6Address(raw[8:24])),
                 str(ipaddress.IPv6Address(raw[24:40])), nxt, raw[7], 0, off)
    pkt.fragment = fragment
    if not fragment:
        _parse_l4(pkt)
    return pkt


def _parse_l4(pkt: Packet) -> None:
    raw, off = pkt.raw, pkt.l4_offset
    if pkt.proto == TCP and len(raw) >= off + 20:
        (pkt.sport, pkt.dport, pkt.seq, pkt.ack, offflags, pkt.window,
         pkt.checksum) = struct.unpack_from("!HHIIHHH", raw, off)
        pkt.dataofs = offflags >> 12
        pkt.flags = offflags & 0x1FF
        # A data offset below 5 is invalid; like scapy (which Geneva's censors
        # use), treat the fixed 20-byte header as the header and the rest as payload.
        pkt.payload = raw[off + max(pkt.dataofs * 4, 20):]
    elif pkt.proto == UDP and len(raw) >= off + 8:
        pkt.sport, pkt.dport, _, pkt.checksum = struct.unpack_from("!HHHH", raw, off)
        pkt.payload = raw[off + 8:]


_ntoa4 = socket.inet_ntoa
