"""A capture read in batches, its packets' headers parsed with numpy: pcap mode's first pass.

Why this exists: pcap mode (``ptlab censor --pcap``) spent most of its time
before the censor saw a packet, reading records one ``read`` at a time and
parsing each header in Python (docs/lab/censor.md §5.1). Here a batch of
records (a few MB of the capture) is read at once, the record boundaries are
walked with one ``unpack_from`` each, and every IPv4 TCP or UDP header is
parsed for the whole batch in a handful of numpy operations. The censor's loop
(:func:`censor_sim.offline.replay`) gets the fields it needs to find each
packet's flow as plain lists, and builds a full :class:`~censor_sim.packet.Packet`
only for the packets the engine must see.

Exactness: a packet is either parsed here exactly as :func:`censor_sim.packet.parse`
would (checked by tests/censor_sim/test_pcapbatch.py), or marked ``SLOW`` and
left to that parser: IPv6, IP options beyond what the arrays read, VLAN stacks
deeper than two, headers cut short. Records the link layer says are not IP are
``NOT_IP``, as :func:`censor_sim.pcapflows.read_packets` drops them; IP packets the
censor never judges (fragments, other protocols) are ``SKIP``.

Formats, link types and errors are those of :mod:`censor_sim.pcapflows`; pcapng
files are read through :mod:`censor_sim.pcapng` and batched after it.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from . import pcapflows, pcapng
from .packet import Packet, _parse_l4

NOT_IP, SKIP, V4, V6, SLOW = 0, 1, 2, 3, 4
PARSED = (V4, V6)  # kinds whose fields the arrays hold
BATCH_BYTES = 4 << 20  # about 8,000 packets of a typical mix: big enough for numpy to pay


@dataclass
class Batch:
    """One batch of records. Per-packet lists are indexed alike; ``src_id`` and
    ``dst_id`` (each address's number in ``addresses``), ``proto``, ``sport``,
    ``dport``, ``flags`` and ``plen`` (the transport payload's length) are
    meaningful for ``V4`` and ``V6`` packets only. ``arrays`` holds these as numpy
    arrays, with where each record and its IP packet lie in ``buf`` (``data``,
    ``cap``, ``linktype``, ``ip0``, ``ipend``) and the IP length field (``wire``)."""

    buf: bytes
    n: int
    ts: list[float]
    kind: list[int]
    addresses: list[str]
    src_id: list[int]
    dst_id: list[int]
    proto: list[int]
    sport: list[int]
    dport: list[int]
    flags: list[int]
    plen: list[int]
    arrays: dict[str, np.ndarray]
    _spans: tuple[list[int], list[int]] | None = None

    @property
    def src(self) -> list[str]:
        return [self.addresses[j] for j in self.src_id]

    @property
    def dst(self) -> list[str]:
        return [self.addresses[j] for j in self.dst_id]

    def wire(self, i: int) -> int:
        """Packet ``i``'s IP length field (V4, V6)."""
        return int(self.arrays["wire"][i])

    def packet(self, i: int) -> Packet | None:
        """Packet ``i`` as :func:`censor_sim.packet.parse` makes it (None: not IP)."""
        buf, arr = self.buf, self.arrays
        kind = self.kind[i]
        if kind == V4 or kind == V6:
            spans = self._spans
            if spans is None:  # made at the first packet asked for: most batches ask few
                spans = self._spans = (arr["ip0"].tolist(), arr["ipend"].tolist())
            raw = buf[spans[0][i]:spans[1][i]]
            addresses = self.addresses
            if kind == V4:
                pkt = Packet(raw, 4, addresses[self.src_id[i]], addresses[self.dst_id[i]],
                             raw[9], raw[8], (raw[4] << 8) | raw[5], (raw[0] & 0x0F) * 4)
            else:
                pkt = Packet(raw, 6, addresses[self.src_id[i]], addresses[self.dst_id[i]],
                             raw[6], raw[7], 0, 40)
            _parse_l4(pkt)
            return pkt
        from .packet import parse

        d = int(arr["data"][i])
        ip = pcapflows._strip_link(buf[d:d + int(arr["cap"][i])], int(arr["linktype"][i]))
        return None if ip is None else parse(ip)

    def wire_length(self, i: int, pkt: Packet) -> int:
        """Packet ``i``'s IP length on the wire (its header's length field), as
        connection tracking counts it."""
        if self.kind[i] in PARSED:
            return self.wire(i)
        raw = pkt.raw
        if pkt.version == 4:
            return (raw[2] << 8) | raw[3]
        return 40 + ((raw[4] << 8) | raw[5])


_NAMES4: dict[int, str] = {}  # address text by value: a capture reuses few
_NAMES6: dict[bytes, str] = {}


def _address_texts(v4: np.ndarray, keys6: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Each address's text and its number within the batch: ``v4`` holds IPv4
    addresses as integers (-1 where the row's address is IPv6), ``keys6`` the
    IPv6 ones (16 bytes a row, read where ``v4`` is -1). IPv4 addresses are
    numbered first."""
    is6 = v4 < 0
    uniq4, inv4 = np.unique(v4[~is6], return_inverse=True)
    names: list[str] = []
    cache4 = _NAMES4
    if len(cache4) > 1 << 20:
        cache4.clear()
    for v in uniq4.tolist():
        name = cache4.get(v)
        if name is None:
            name = cache4[v] = socket.inet_ntoa(v.to_bytes(4, "big"))
        names.append(name)
    ids = np.empty(len(v4), np.int64)
    ids[~is6] = inv4
    if is6.any():
        void = np.ascontiguousarray(keys6[is6]).view(np.dtype((np.void, 16))).ravel()
        uniq6, inv6 = np.unique(void, return_inverse=True)
        cache6 = _NAMES6
        if len(cache6) > 1 << 20:
            cache6.clear()
        for raw in uniq6.tolist():
            name = cache6.get(raw)
            if name is None:
                name = cache6[raw] = str(ipaddress.IPv6Address(raw))
            names.append(name)
        ids[is6] = inv6 + len(uniq4)
    return names, ids


def _u16(a: np.ndarray, at: np.ndarray) -> np.ndarray:
    return (a[at].astype(np.int64) << 8) | a[at + 1]


def _parse(buf: bytes, ts: np.ndarray, data: np.ndarray, cap: np.ndarray,
           orig: np.ndarray, linktype: np.ndarray) -> Batch:
    n = len(data)
    # Zeros past the end: every index below is clipped to the buffer's end, and reads
    # at most 40 bytes beyond it.
    a = np.frombuffer(buf + bytes(64), dtype=np.uint8)
    last = len(buf)

    def at(k: np.ndarray) -> np.ndarray:
        return np.minimum(k, last)

    kind = np.full(n, SLOW, np.int64)
    off = np.zeros(n, np.int64)
    deeper = np.zeros(n, bool)  # VLAN stacks deeper than two: the per-packet parser's
    eth = linktype == pcapflows._ETHERNET
    if eth.any():
        ok = eth & (cap >= 14)
        et = np.where(ok, _u16(a, at(data + 12)), 0)
        off = np.where(eth, 14, off)
        for _ in range(2):  # up to two VLAN tags, as real captures carry
            tag = ok & ((et == 0x8100) | (et == 0x88A8)) & (cap >= off + 4)
            et = np.where(tag, _u16(a, at(data + off + 2)), et)
            off = np.where(tag, off + 4, off)
        deeper = ok & ((et == 0x8100) | (et == 0x88A8)) & (cap >= off + 4)
        not_ip = eth & ~deeper & (et != 0x0800) & (et != 0x86DD)
        kind = np.where(not_ip, NOT_IP, kind)
        kind = np.where(deeper, SLOW, kind)
    for lt, hdr, where in ((pcapflows._SLL, 16, 14), (pcapflows._SLL2, 20, 0)):
        sel = linktype == lt
        if sel.any():
            et = _u16(a, at(data + where))
            ip = sel & (cap >= where + 2) & ((et == 0x0800) | (et == 0x86DD))
            kind = np.where(sel & ~ip, NOT_IP, kind)
            off = np.where(sel, hdr, off)
    ip0 = data + off
    capip = cap - off
    first = a[at(ip0)]
    ver = first >> 4
    maybe = (kind == SLOW) & (capip >= 1)
    # IPv4, as packet._parse4 reads it.
    v4 = maybe & (ver == 4) & (capip >= 20)
    ihl = (first & 0x0F).astype(np.int64) * 4
    total = _u16(a, at(ip0 + 2))
    v4 &= (ihl >= 20) & (capip >= ihl)
    frag = ((a[at(ip0 + 6)].astype(np.int64) & 0x1F) << 8 | a[at(ip0 + 7)]) != 0
    # IPv6 with TCP or UDP right after its fixed header, as packet._parse6 reads it.
    v6 = maybe & (ver == 6) & (capip >= 40)
    p6len = _u16(a, at(ip0 + 4))
    nxt = a[at(ip0 + 6)].astype(np.int64)
    ext = (nxt == 0) | (nxt == 43) | (nxt == 60) | (nxt == 44)
    proto = np.where(v6, nxt, a[at(ip0 + 9)].astype(np.int64))
    hlen = np.where(v6, 40, ihl)
    rawlen = np.where(v6, np.where(40 + p6len <= capip, 40 + p6len, capip),
                      np.where((total > 0) & (total <= capip), total, capip))
    l4 = ip0 + hlen
    tcp = (v4 & ~frag | v6 & ~ext) & (proto == 6) & (rawlen >= hlen + 20)
    udp = (v4 & ~frag | v6 & ~ext) & (proto == 17) & (rawlen >= hlen + 8)
    # Parsed but never judged: fragments and protocols other than TCP and UDP.
    other = (proto != 6) & (proto != 17)
    kind = np.where(v4 & (frag | other) | v6 & ~ext & other, SKIP, kind)
    kind = np.where(tcp | udp, np.where(v6, V6, V4), kind)
    # What packet.parse returns None for: too short, or no IP version it reads.
    none = maybe & ~v4 & (((ver == 4) & ((capip < 20) | (ihl < 20) | (capip < ihl)))
                          | ((ver == 6) & (capip < 40)) | ((ver != 4) & (ver != 6)))
    kind = np.where(none | ((kind == SLOW) & (capip < 1)), SKIP, kind)
    kind = np.where(deeper, SLOW, kind)
    ok = tcp | udp
    sport = np.where(ok, _u16(a, at(l4)), 0)
    dport = np.where(ok, _u16(a, at(l4 + 2)), 0)
    offbyte = a[at(l4 + 12)].astype(np.int64)
    flags = np.where(tcp, ((offbyte & 1) << 8) | a[at(l4 + 13)], 0)
    thdr = np.maximum((offbyte >> 4) * 4, 20)
    plen = np.where(tcp, np.maximum(rawlen - hlen - thdr, 0),
                    np.where(udp, rawlen - hlen - 8, 0))
    wire = np.where(v6, 40 + p6len, np.where(total > 0, total, np.maximum(orig - off, 0)))
    # Addresses: IPv4 as integers, IPv6 as 16-byte keys; rows of other kinds get
    # 0.0.0.0 (their text is never read).
    rows = np.flatnonzero(ok)
    v4 = np.zeros(2 * n, np.int64)
    keys6 = np.zeros((2 * n, 16), np.uint8)
    if len(rows):
        r6 = rows[v6[rows]]
        r4 = rows[~v6[rows]]
        for half, k4, k6 in ((0, 12, 8), (n, 16, 24)):  # source, then destination
            b = a[at(ip0[r4, None] + k4 + np.arange(4))].astype(np.int64)
            v4[half + r4] = (b[:, 0] << 24) | (b[:, 1] << 16) | (b[:, 2] << 8) | b[:, 3]
            keys6[half + r6] = a[at(ip0[r6, None] + k6 + np.arange(16))]
            v4[half + r6] = -1
    addresses, ids = _address_texts(v4, keys6)
    arrays = {"kind": kind, "ts": ts, "src_id": ids[:n], "dst_id": ids[n:],
              "addresses": np.asarray(addresses, dtype=object),
              "proto": proto, "sport": sport, "dport": dport, "flags": flags,
              "plen": plen, "wire": wire, "data": data, "cap": cap, "linktype": linktype,
              "ip0": ip0, "ipend": ip0 + rawlen}
    return Batch(buf, n, ts.tolist(), kind.tolist(), addresses, ids[:n].tolist(),
                 ids[n:].tolist(), proto.tolist(), sport.tolist(), dport.tolist(),
                 flags.tolist(), plen.tolist(), arrays)


def from_packets(packets: list[tuple[float, bytes]]) -> Batch:
    """A batch of IP packets with their times, as a raw-IP capture would hold them."""
    chunks = [raw for _, raw in packets]
    lengths = np.asarray([len(c) for c in chunks], np.int64)
    data = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return _parse(b"".join(chunks), np.asarray([t for t, _ in packets], np.float64), data,
                  lengths, lengths, np.full(len(chunks), pcapflows._RAW, np.int64))


def batches(path: Path | str, batch_bytes: int = BATCH_BYTES) -> Iterator[Batch]:
    """Every record of a classic pcap or pcapng file, a batch at a time; ``-`` reads
    standard input, handing out what has arrived rather than waiting for a full
    batch (``tcpdump -w - | ...``)."""
    if str(path) == "-":
        yield from _stream(sys.stdin.buffer, "standard input", batch_bytes)
        return
    with open(path, "rb") as f:
        yield from _stream(f, Path(path).name, batch_bytes)


def _stream(f: BinaryIO, name: str, batch_bytes: int) -> Iterator[Batch]:
    magic = f.read(4)
    if magic == pcapng.SHB_MAGIC:
        yield from _pcapng_batches(f, magic, name, batch_bytes)
    else:
        yield from _classic_batches(f, magic, name, batch_bytes)


def _classic_batches(f: BinaryIO, magic: bytes, name: str,
                     batch_bytes: int) -> Iterator[Batch]:
    head = magic + f.read(20)
    if len(head) < 24 or magic not in pcapflows._MAGIC:
        raise pcapflows.PcapError(f"{name}: neither a pcap nor a pcapng file")
    endian, unit = pcapflows._MAGIC[magic]
    linktype = struct.unpack(endian + "I", head[20:24])[0] & 0x0FFFFFFF
    if linktype not in pcapflows._LINKTYPES:
        # Raised at the first record, as the record-by-record reader does.
        if f.read(16):
            raise pcapflows.PcapError(f"{name}: unsupported link type {linktype}")
        return
    incl_at = struct.Struct(endian + "I").unpack_from
    dt = np.dtype(endian + "u4")
    read = getattr(f, "read1", f.read)
    pending = b""
    while True:
        chunk = read(batch_bytes)
        if not chunk:
            return  # whatever is pending is a record cut off mid-way: ignored
        buf = pending + chunk if pending else chunk
        offs: list[int] = []
        off, n = 0, len(buf)
        append = offs.append
        while off + 16 <= n:
            nxt = off + 16 + incl_at(buf, off + 8)[0]
            if nxt > n:
                break
            append(off)
            off = nxt
        pending = buf[off:]
        if not offs:
            continue
        at = np.asarray(offs, np.int64)
        view = np.frombuffer(buf, dtype=np.uint8)
        heads = view[(at[:, None] + np.arange(16)).ravel()].reshape(-1, 16)
        words = heads.copy().view(dt).astype(np.int64)  # sec, frac, incl, orig
        ts = words[:, 0] + words[:, 1] * unit
        yield _parse(buf, ts.astype(np.float64), at + 16, words[:, 2], words[:, 3],
                     np.full(len(at), linktype, np.int64))


def _pcapng_batches(f: BinaryIO, magic: bytes, name: str,
                    batch_bytes: int) -> Iterator[Batch]:
    chunks: list[bytes] = []
    ts: list[float] = []
    lts: list[int] = []
    origs: list[int] = []
    size = 0
    checked = -1

    def flush() -> Batch:
        lengths = np.asarray([len(c) for c in chunks], np.int64)
        data = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        return _parse(b"".join(chunks), np.asarray(ts, np.float64), data, lengths,
                      np.asarray(origs, np.int64), np.asarray(lts, np.int64))

    try:
        for t, linktype, data, orig in pcapng.records(f, consumed=magic):
            if linktype != checked:
                if linktype not in pcapflows._LINKTYPES:
                    raise pcapflows.PcapError(f"{name}: unsupported link type {linktype}")
                checked = linktype
            chunks.append(data)
            ts.append(t)
            lts.append(linktype)
            origs.append(orig)
            size += len(data) + 64
            if size >= batch_bytes:
                yield flush()
                chunks, ts, lts, origs, size = [], [], [], [], 0
    except pcapng.PcapngError as exc:
        raise pcapflows.PcapError(f"{name}: pcapng: {exc}") from None
    if chunks:
        yield flush()
