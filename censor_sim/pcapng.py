"""Packets from a pcapng file: the format Wireshark and dumpcap write by default.

Why this exists: a researcher's capture is as likely to be pcapng as classic
pcap, and asking them to convert it first loses the per-interface link types
and timestamp resolutions that the conversion would have to guess.
:func:`records` walks the blocks of the IETF draft (draft-ietf-opsawg-pcapng,
"PCAP Next Generation (pcapng) Capture File Format"):

* Section Header Blocks (type 0x0A0D0D0A) set each section's byte order by
  their byte-order magic 0x1A2B3C4D; each section has its own interfaces.
* Interface Description Blocks (type 1) give an interface's link type and
  snap length, and its options ``if_tsresol`` (9: 10^-v seconds per tick, or
  2^-v when the top bit is set; default microseconds) and ``if_tsoffset``
  (14: seconds added to every timestamp).
* Enhanced Packet Blocks (6) and the obsolete Packet Blocks (2) carry one
  packet each, with its interface, 64-bit timestamp, captured and original
  lengths. Simple Packet Blocks (3) carry one packet of interface 0 and no
  timestamp: it is given the previous packet's, so the clock never runs back.
* Every other block (name resolution, statistics, secrets, custom) is skipped.

A file cut off in the middle of a block (the writer was killed) ends at the
last whole block, as a classic pcap does; anything else malformed is a
:class:`PcapngError` naming the block's offset.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

SHB, IDB, OPB, SPB, EPB = 0x0A0D0D0A, 1, 2, 3, 6
SHB_MAGIC = b"\x0a\x0d\x0d\x0a"  # the first four bytes of every pcapng file
_BYTE_ORDER = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
_OPT_TSRESOL, _OPT_TSOFFSET = 9, 14
_MAX_BLOCK = 1 << 26  # 64 MiB: far above any real packet, below a memory problem


class PcapngError(ValueError):
    """A pcapng file this reader cannot make sense of."""


class _Interface:
    __slots__ = ("linktype", "snaplen", "unit", "offset")

    def __init__(self, linktype: int, snaplen: int, unit: float, offset: int) -> None:
        self.linktype, self.snaplen, self.unit, self.offset = linktype, snaplen, unit, offset


def records(f: BinaryIO, consumed: bytes = b"") -> Iterator[tuple[float, int, bytes, int]]:
    """(timestamp, link type, captured bytes, original length) for each packet of
    the pcapng file ``f``, read from its start, of which the caller may already
    have read ``consumed`` (at most 8 bytes: a pipe cannot be rewound)."""
    endian = "<"
    head_s, epb_s = struct.Struct("<II"), struct.Struct("<IIIII")
    interfaces: list[_Interface] = []
    last_ts = 0.0
    pos = 0
    read = f.read
    while True:
        if consumed:
            head, consumed = consumed + read(8 - len(consumed)), b""
        else:
            head = read(8)
        if len(head) < 8:
            return
        if head[:4] == SHB_MAGIC:
            magic = read(4)
            if len(magic) < 4:
                return
            if magic not in _BYTE_ORDER:
                raise PcapngError(f"offset {pos}: section header without the byte-order "
                                  f"magic 1A2B3C4D (found {magic.hex()})")
            endian = _BYTE_ORDER[magic]
            head_s, epb_s = struct.Struct(endian + "II"), struct.Struct(endian + "IIIII")
            btype, length = SHB, _block_length(head_s, head, pos)
            rest = read(length - 12)
            if len(rest) < length - 12:
                return
            body = magic + rest
            major = struct.unpack_from(endian + "H", body, 4)[0] if len(body) >= 6 else 0
            if major != 1:
                raise PcapngError(f"offset {pos}: pcapng version {major}, not 1")
            interfaces = []  # a new section: its own interfaces
        else:
            btype, length = head_s.unpack(head)
            if length < 12 or length % 4 or length > _MAX_BLOCK:
                _block_length(head_s, head, pos)  # raises, naming the length
            body = read(length - 8)
            if len(body) < length - 8:
                return
        if body[-4:] != head[4:8]:
            raise PcapngError(f"offset {pos}: block's trailing length differs from its "
                              "leading one (a corrupt file)")
        if btype == EPB or btype == OPB:
            if length < 32:
                raise PcapngError(f"offset {pos}: packet block too short")
            if btype == EPB:
                if_id, hi, lo, caplen, orig = epb_s.unpack_from(body, 0)
            else:  # the obsolete block: a 16-bit interface and a drops count
                if_id, _drops, hi, lo, caplen, orig = struct.unpack_from(endian + "HHIIII",
                                                                         body, 0)
            if if_id >= len(interfaces):
                _interface(interfaces, if_id, pos)  # raises, naming the interface
            iface = interfaces[if_id]
            if 24 + caplen > length - 8:
                raise PcapngError(f"offset {pos}: captured length {caplen} overruns its block")
            last_ts = ((hi << 32) | lo) * iface.unit + iface.offset
            yield last_ts, iface.linktype, body[20:20 + caplen], orig
        elif btype == SPB:
            if length < 16:
                raise PcapngError(f"offset {pos}: simple packet block too short")
            orig = struct.unpack_from(endian + "I", body, 0)[0]
            iface = _interface(interfaces, 0, pos)
            caplen = min(orig, iface.snaplen or orig, length - 16)
            yield last_ts, iface.linktype, body[4:4 + caplen], orig
        elif btype == IDB:
            if length < 20:
                raise PcapngError(f"offset {pos}: interface description block too short")
            linktype, _reserved, snaplen = struct.unpack_from(endian + "HHI", body, 0)
            unit, offset = _timestamp_options(memoryview(body)[8:-4], endian, pos)
            interfaces.append(_Interface(linktype, snaplen, unit, offset))
        pos += length


def _block_length(head_s: struct.Struct, head: bytes, pos: int) -> int:
    length = head_s.unpack(head)[1]
    if length < 12 or length % 4 or length > _MAX_BLOCK:
        raise PcapngError(f"offset {pos}: block length {length} (a multiple of 4, "
                          f"12 to {_MAX_BLOCK} bytes)")
    return length


def _interface(interfaces: list[_Interface], if_id: int, pos: int) -> _Interface:
    if if_id >= len(interfaces):
        raise PcapngError(f"offset {pos}: packet of interface {if_id}, but the section "
                          f"describes {len(interfaces)}")
    return interfaces[if_id]


def _timestamp_options(opts: memoryview, endian: str, pos: int) -> tuple[float, int]:
    """An interface's seconds per timestamp tick and its offset in seconds."""
    unit, offset, i = 1e-6, 0, 0
    while i + 4 <= len(opts):
        code, size = struct.unpack_from(endian + "HH", opts, i)
        value = opts[i + 4:i + 4 + size]
        if code == 0 or len(value) < size:
            break
        if code == _OPT_TSRESOL and size >= 1:
            v = value[0]
            exp = v & 0x7F
            if exp > 63:
                raise PcapngError(f"offset {pos}: if_tsresol {v:#x} is out of range")
            unit = 2.0 ** -exp if v & 0x80 else 10.0 ** -exp
        elif code == _OPT_TSOFFSET and size >= 8:
            offset = struct.unpack_from(endian + "q", value, 0)[0]
        i += 4 + size + (-size % 4)
    return unit, offset
