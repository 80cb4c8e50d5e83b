"""OpenVPN fingerprinting after Xue et al., USENIX Security 2022 (docs/censors/vpn.md §2).

Why this exists: OpenVPN sends a clear header on every packet: over UDP one byte,
the opcode (high 5 bits) and key id (low 3 bits); over TCP the same byte after a
16-bit length (the paper's Figure 3). Xue et al. fingerprint a flow from those bytes
alone, without matching their values, so that XOR-obfuscated OpenVPN, which maps each
opcode byte to one other byte, is caught too:

* the **opcode fingerprint** (§6.1, Algorithm 1) over the first N packets, N = 100 in
  their deployment (§7.2): the number of distinct opcode bytes fits the protocol
  (4 to 10), and the client's and server's reset opcodes are not seen again once the
  handshake is complete;
* the **ACK fingerprint** (§6.2, thresholds from §7.1 Table 2): the size of the
  first control-channel ACK, found at the third packet, counted in 10-packet bins:
  1–3 in bin 1, 2–5 in bin 2, at most 5 in bins 3–5 and at most 1 afterwards.

The Filter flags a flow when either matches (§6.4).

Two readings are ours and documented in docs/censors/vpn.md §2.3:

* Algorithm 1 as printed starts its set empty and adds opcodes from the third
  packet on. Read literally, a vanilla OpenVPN 2.6 flow (resets 7 and 8, then only
  4, 5 and 9) collects 3 distinct values and is never flagged, against the
  algorithm's own comment ("at least 4 different opcodes needed to complete
  handshake") and the 85.9 % recall it reports on vanilla configurations. So the
  set starts with the two resets; ``literal=True`` keeps the printed form.
* Over TCP, the paper reads the opcode at byte 2 of each packet and does not say
  what happens when TCP packets and OpenVPN records do not line up. We follow the
  16-bit framing through each direction's stream and count records, which is what
  the header describes; a length outside [1, max_len] (1,627 bytes for the default
  MTU, §6.3.2) ends the framing as OpenVPN's own reader would.

Nothing here raises on malformed input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# OpenVPN's opcodes (openvpn src/openvpn/ssl_pkt.h), for tests and evidence only: the
# fingerprints below never compare opcode values.
P_CONTROL_HARD_RESET_CLIENT_V1 = 1
P_CONTROL_HARD_RESET_SERVER_V1 = 2
P_CONTROL_SOFT_RESET_V1 = 3
P_CONTROL_V1 = 4
P_ACK_V1 = 5
P_DATA_V1 = 6
P_CONTROL_HARD_RESET_CLIENT_V2 = 7
P_CONTROL_HARD_RESET_SERVER_V2 = 8
P_DATA_V2 = 9
P_CONTROL_HARD_RESET_CLIENT_V3 = 10
P_CONTROL_WKC_V1 = 11

OPCODE_SHIFT = 3
WINDOW = 100  # N of the paper's deployment (§7.2)
MIN_OPCODES, MAX_OPCODES = 4, 10  # Algorithm 1's bounds
MAX_LEN = 1627  # §6.3.2: the longest valid TCP record for the default TUN MTU of 1500
ACK_INDEX = 2  # §6.2: the first ACK is usually the third packet of the session
BIN = 10  # §6.2: 10-packet bins
# Table 2: (first bin, last bin or None for "to N/10", lowest, highest count).
ACK_BINS = ((1, 1, 1, 3), (2, 2, 2, 5), (3, 5, 0, 5), (6, None, 0, 1))


def opcode(byte: int) -> int:
    """The opcode in an OpenVPN header byte (its high 5 bits)."""
    return byte >> OPCODE_SHIFT


@dataclass(slots=True)
class OpcodeFilter:
    """Algorithm 1, fed one opcode byte per packet; ``decision`` is None until known.

    It is known early when it can no longer hold: a reset byte seen again after
    four distinct values, or more than ten distinct values. Otherwise it is known
    at packet ``n``.
    """

    n: int = WINDOW
    literal: bool = False
    seen: list[int] = field(default_factory=list)
    distinct: set[int] = field(default_factory=set)
    decision: bool | None = None

    def add(self, byte: int) -> bool | None:
        if self.decision is not None:
            return self.decision
        i = len(self.seen)
        self.seen.append(byte)
        if i < 2:
            if not self.literal:
                self.distinct.add(byte)
            return self._decide_at(i + 1)
        resets = (self.seen[0], self.seen[1])
        if byte in resets and len(self.distinct) >= MIN_OPCODES:
            self.decision = False
            return False
        self.distinct.add(byte)
        if len(self.distinct) > MAX_OPCODES:
            self.decision = False
            return False
        return self._decide_at(i + 1)

    def _decide_at(self, count: int) -> bool | None:
        if count >= self.n:
            self.decision = MIN_OPCODES <= len(self.distinct) <= MAX_OPCODES
        return self.decision


def opcode_fingerprint(bytes_: Sequence[int], n: int = WINDOW,
                       literal: bool = False) -> bool | None:
    """Algorithm 1 over a flow's opcode bytes; None if fewer than ``n`` and undecided."""
    f = OpcodeFilter(n, literal)
    for b in bytes_:
        if f.add(b) is not None:
            break
    return f.decision


def ack_bins(sizes: Sequence[int], n: int = WINDOW, ack_index: int = ACK_INDEX) -> list[int]:
    """Per 10-packet bin of the first ``n`` packets, how many have the ACK's size."""
    if len(sizes) <= ack_index:
        return []
    ack = sizes[ack_index]
    window = sizes[:n]
    return [sum(1 for s in window[i : i + BIN] if s == ack) for i in range(0, len(window), BIN)]


def ack_fingerprint(sizes: Sequence[int], n: int = WINDOW,
                    ack_index: int = ACK_INDEX) -> bool | None:
    """Table 2's thresholds over the first ``n`` packet sizes; None until ``n`` are in."""
    if len(sizes) < n:
        return None
    bins = ack_bins(sizes, n, ack_index)
    for first, last, low, high in ACK_BINS:
        for k in range(first, (last or len(bins)) + 1):
            if k <= len(bins) and not low <= bins[k - 1] <= high:
                return False
    return True


def _ack_bounds(k: int) -> tuple[int, int]:
    """Table 2's (lowest, highest) count for 10-packet bin ``k`` (from 1)."""
    for first, last, low, high in ACK_BINS:
        if first <= k and (last is None or k <= last):
            return low, high
    raise ValueError(f"no ACK bin {k}")  # pragma: no cover - the table covers k >= 1


def ack_fingerprint_failed(sizes: Sequence[int], n: int = WINDOW,
                           ack_index: int = ACK_INDEX) -> bool:
    """True once Table 2 can no longer hold, whatever packets follow: a bin already
    over its highest count, or a finished bin (all its packets in, within the first
    ``n``) under its lowest. Counts only grow, so either is final.

    Why: a flow whose opcode fingerprint has failed can still be flagged by this
    one, so without this test the Filter would watch every such flow to packet
    ``n``. A QUIC or DNS flow fails both within two or three bins, and in-path
    each packet watched is a packet that waits. At ``n`` packets this is exactly
    ``ack_fingerprint(...) is False``."""
    if len(sizes) <= ack_index:
        return False
    seen = min(len(sizes), n)
    for k, count in enumerate(ack_bins(sizes, n, ack_index), start=1):
        low, high = _ack_bounds(k)
        if count > high or (count < low and min(k * BIN, n) <= seen):
            return True
    return False


@dataclass(slots=True)
class TcpFramer:
    """Follows OpenVPN's 16-bit framing through one direction of a TCP stream.

    ``feed`` takes each segment with its sequence number and returns, for every record
    whose length and opcode byte have arrived, ``(opcode byte, framed size)``. A
    retransmitted byte is skipped; a gap (a segment lost before the censor, or out
    of order) or a length outside [1, max_len] makes ``broken`` true for good: the
    caller stops, which under-blocks, as the paper found loss does (§7.3).
    """

    max_len: int = MAX_LEN
    next_seq: int | None = None
    header: bytearray = field(default_factory=bytearray)
    remaining: int = 0  # bytes of the current record's body still to come
    broken: bool = False

    def feed(self, seq: int, data: bytes) -> list[tuple[int, int]]:
        if self.broken or not data:
            return []
        if self.next_seq is not None:
            skip = (self.next_seq - seq) % (1 << 32)
            if skip >= 1 << 31:  # seq is ahead of what we expect: a gap
                self.broken = True
                return []
            if skip >= len(data):
                return []  # all of it seen before
            data = data[skip:]
            seq = (seq + skip) % (1 << 32)
        self.next_seq = (seq + len(data)) % (1 << 32)
        out: list[tuple[int, int]] = []
        pos = 0
        while pos < len(data):
            if self.remaining:
                take = min(self.remaining, len(data) - pos)
                self.remaining -= take
                pos += take
                continue
            need = 3 - len(self.header)
            self.header += data[pos : pos + need]
            pos += min(need, len(data) - pos)
            if len(self.header) < 3:
                break
            length = (self.header[0] << 8) | self.header[1]
            if not 1 <= length <= self.max_len:
                self.broken = True
                return out
            out.append((self.header[2], length + 2))
            self.remaining = length - 1
            self.header.clear()
        return out
