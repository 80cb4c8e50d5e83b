"""Flows from a pcap, seen as the censor sees them: the learning censor's training input.

A dataset is only honest if its features are the ones the live censor will
compute. This module reads a capture taken on the censor's client-side
interface, parses each packet with the censor's own parser
(:func:`censor_sim.packet.parse`), orients it (client = an address inside
the censored network), and fills one :class:`FlowLog` per connection through
the same :meth:`FlowLog.add` the live ``ml`` inspector uses. Like the
engine, it ignores TCP connections whose first packet is not the client's
SYN (they began before the capture).

The capture may be cut short (a snap length): the true payload length comes
from the IP header, and only the captured bytes feed the entropy features.
The reader handles classic pcap (micro- or nanosecond, either byte order)
and pcapng (:mod:`censor_sim.pcapng`) with Ethernet, Linux cooked (v1, v2)
or raw-IP link types; it is small because only this much is needed, and it
refuses anything else by name.
"""

from __future__ import annotations

import ipaddress
import struct
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from . import pcapng
from .detectors.ml.flowlog import DOWN, UP, FlowLog
from .flows import FlowKey, KeyedFlow
from .packet import TCP, UDP, Packet, parse

_MAGIC = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
          b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}
_ETHERNET, _RAW, _RAW_OLD, _SLL, _SLL2, _IPV4, _IPV6 = 1, 101, 12, 113, 276, 228, 229


class PcapError(ValueError):
    """A file that is not a capture this reader understands."""


_LINKTYPES = (_ETHERNET, _RAW, _RAW_OLD, _SLL, _SLL2, _IPV4, _IPV6)


def read_packets(path: Path | str) -> Iterator[tuple[float, bytes, int]]:
    """(timestamp, IP packet as captured, original length) for each record of a
    classic pcap or a pcapng file (:mod:`censor_sim.pcapng`); ``-`` reads
    standard input (``tcpdump -w - | ...``), packet by packet as they come."""
    if str(path) == "-":
        yield from _read_stream(sys.stdin.buffer, "standard input")
        return
    with open(path, "rb") as f:
        yield from _read_stream(f, Path(path).name)


def _read_stream(f: BinaryIO, name: str) -> Iterator[tuple[float, bytes, int]]:
    # Read front to back, never seeking, so that a pipe reads as a file does.
    magic = f.read(4)
    records = (_pcapng_records(f, magic, name) if magic == pcapng.SHB_MAGIC
               else _classic_records(f, magic, name))
    checked = -1  # the last link type found supported (pcapng's vary by interface)
    for ts, linktype, data, orig in records:
        if linktype != checked:
            if linktype not in _LINKTYPES:
                raise PcapError(f"{name}: unsupported link type {linktype}")
            checked = linktype
        ip = _strip_link(data, linktype)
        if ip is not None:
            yield ts, ip, orig - (len(data) - len(ip))


def _pcapng_records(f: BinaryIO, magic: bytes,
                    name: str) -> Iterator[tuple[float, int, bytes, int]]:
    try:
        yield from pcapng.records(f, consumed=magic)
    except pcapng.PcapngError as exc:
        raise PcapError(f"{name}: pcapng: {exc}") from None


def _classic_records(f: BinaryIO, magic: bytes,
                     name: str) -> Iterator[tuple[float, int, bytes, int]]:
    """(timestamp, link type, captured bytes, original length) per classic record."""
    head = magic + f.read(20)
    if len(head) < 24 or magic not in _MAGIC:
        raise PcapError(f"{name}: neither a pcap nor a pcapng file")
    endian, unit = _MAGIC[magic]
    linktype = struct.unpack(endian + "I", head[20:24])[0] & 0x0FFFFFFF
    rec = struct.Struct(endian + "IIII")
    while True:
        h = f.read(16)
        if len(h) < 16:
            return
        sec, frac, incl, orig = rec.unpack(h)
        data = f.read(incl)
        if len(data) < incl:
            return  # a capture cut off mid-record (the writer was killed)
        yield sec + frac * unit, linktype, data, orig


def _strip_link(data: bytes, linktype: int) -> bytes | None:
    if linktype == _ETHERNET:
        off, etype = 14, data[12:14]
        while etype in (b"\x81\x00", b"\x88\xa8") and len(data) >= off + 4:
            etype, off = data[off + 2:off + 4], off + 4
        return data[off:] if etype in (b"\x08\x00", b"\x86\xdd") else None
    if linktype == _SLL:
        return data[16:] if data[14:16] in (b"\x08\x00", b"\x86\xdd") else None
    if linktype == _SLL2:
        return data[20:] if data[0:2] in (b"\x08\x00", b"\x86\xdd") else None
    return data


def wire_payload_length(pkt: Packet, orig_len: int) -> int:
    """The transport payload's length on the wire, even if the capture kept less."""
    if pkt.version == 4:
        total = struct.unpack_from("!H", pkt.raw, 2)[0]
    else:
        total = 40 + struct.unpack_from("!H", pkt.raw, 4)[0]
    total = min(total, orig_len) if orig_len else total
    header = max(pkt.dataofs * 4, 20) if pkt.proto == TCP else 8
    return max(total - pkt.l4_offset - header, 0)


@dataclass
class PcapFlow(KeyedFlow):
    key: FlowKey
    start: float  # capture time of the first packet
    log: FlowLog
    packets: int = 0  # all packets of the flow in the capture, not only the logged ones


def flows_from_pcap(path: Path, clients: Iterable[str], window: int = 30,
                    protocols: tuple[int, ...] = (TCP,)) -> list[PcapFlow]:
    """The flows in `path` whose client is one of `clients`, in order of their start."""
    nets = [ipaddress.ip_network(c, strict=False) for c in clients]
    inside: dict[str, bool] = {}

    def is_client(addr: str) -> bool:
        if addr not in inside:
            a = ipaddress.ip_address(addr)
            inside[addr] = any(a in n for n in nets)
        return inside[addr]

    flows: dict[FlowKey, PcapFlow] = {}
    skipped: set[FlowKey] = set()
    out: list[PcapFlow] = []
    for ts, raw, orig in read_packets(path):
        pkt = parse(raw)
        if pkt is None or pkt.fragment or pkt.proto not in protocols:
            continue
        if is_client(pkt.src):
            key, up = (pkt.src, pkt.dst, pkt.proto, pkt.sport, pkt.dport), True
        elif is_client(pkt.dst):
            key, up = (pkt.dst, pkt.src, pkt.proto, pkt.dport, pkt.sport), False
        else:
            continue
        if key in skipped:
            continue
        flow = flows.get(key)
        if flow is None:
            if pkt.proto == TCP and not (up and pkt.pure_syn):
                skipped.add(key)
                continue
            if pkt.proto == UDP and not up:
                skipped.add(key)
                continue
            flow = flows[key] = PcapFlow(key, ts, FlowLog(window))
            out.append(flow)
        elif pkt.proto == TCP and up and pkt.pure_syn and flow.packets > 2:
            # The same 5-tuple reused for a new connection: a new flow.
            flow = flows[key] = PcapFlow(key, ts, FlowLog(window))
            out.append(flow)
        flow.packets += 1
        flow.log.add(UP if up else DOWN, ts - flow.start, wire_payload_length(pkt, orig),
                     pkt.payload)
    return out
