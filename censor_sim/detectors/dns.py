"""DNS query parsing (UDP and TCP), name matching, and the forged answer a censor injects.

Why: DNS injection is the cheapest censorship there is (the GFW's best-known
mechanism; docs/censors/keywords.md §3 notes Geneva's evasion of it): the censor reads the
question of a query on the wire and races the real resolver with a forged response.
This module gives the engine the question (:func:`parse_query`,
:func:`parse_tcp_query`), the match (:func:`qname_matches`) and the forged bytes
(:func:`forge_response`).

Wire format: RFC 1035 §4.1 (12-byte header; question = QNAME, QTYPE, QCLASS), §4.1.4
(compression pointers), §2.3.4 (labels ≤ 63 bytes, names ≤ 255 bytes); RFC 7766 §8
(over TCP each message is preceded by a two-byte length); RFC 6891 §6.1.1 (label types
0b01 and 0b10 are extended/reserved: refused here). The parser is hand-written, not
scapy's, because the censor's hot path needs it fast and because hostile input
(pointer loops, overlong names) must give None, not an exception or a hang: every
compression pointer must point strictly before the start of the label run that
contains it, so any chain of pointers terminates.

Names are returned in presentation form, lowercased (ASCII only, as DNS compares
names: RFC 4343), without the trailing dot; the root is ``""``. A ``.`` or ``\\``
inside a label is escaped with a backslash and other bytes outside ``!``..``~`` as
``\\DDD`` (RFC 1035 §5.1), so distinct wire names never collide as strings.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from . import NeedMore

HEADER_LEN = 12
MAX_NAME = 255
QTYPE_A = 1
QTYPE_AAAA = 28
QCLASS_IN = 1


@dataclass(frozen=True)
class DnsQuery:
    """The header and first question of a DNS query.

    ``labels`` keeps the question name's labels exactly as sent (case included), so a
    forged answer can echo a 0x20-randomised name byte for byte; ``question_end`` is
    the offset just past the first question in the message.
    """

    id: int
    flags: int
    qname: str
    qtype: int
    qclass: int
    qdcount: int
    labels: tuple[bytes, ...]
    question_end: int

    @property
    def opcode(self) -> int:
        return (self.flags >> 11) & 0xF

    @property
    def rd(self) -> bool:
        return bool(self.flags & 0x0100)


def _read_name(msg: bytes, pos: int) -> tuple[list[bytes], int] | None:
    """Labels of the name at ``pos`` and the offset just after it, or None if malformed."""
    labels: list[bytes] = []
    length = 1  # the root label's length byte
    end: int | None = None
    limit = pos  # a pointer must point before the run of labels it ends
    n_msg = len(msg)
    while True:
        if pos >= n_msg:
            return None
        n = msg[pos]
        kind = n & 0xC0
        if kind == 0xC0:
            if pos + 1 >= n_msg:
                return None
            target = ((n & 0x3F) << 8) | msg[pos + 1]
            if end is None:
                end = pos + 2
            if target >= limit:
                return None
            limit = pos = target
            continue
        if kind:
            return None
        if n == 0:
            return labels, (pos + 1 if end is None else end)
        if pos + 1 + n > n_msg:
            return None
        length += n + 1
        if length > MAX_NAME:
            return None
        labels.append(msg[pos + 1 : pos + 1 + n])
        pos += 1 + n


def _label_text(label: bytes) -> str:
    out = []
    for c in label.lower():
        if c in (0x2E, 0x5C):
            out.append("\\" + chr(c))
        elif 0x21 <= c <= 0x7E:
            out.append(chr(c))
        else:
            out.append(f"\\{c:03d}")
    return "".join(out)


def name_text(labels: Iterable[bytes]) -> str:
    """Presentation form of a wire name: lowercase, escaped, no trailing dot."""
    return ".".join(_label_text(lb) for lb in labels)


def parse_query(payload: bytes) -> DnsQuery | None:
    """Parse a DNS query message (a UDP payload, or a TCP message without its length).

    None unless it has a full header with QR=0 (a query, not a response), at least one
    question, and a well-formed first question. Other sections are not parsed: the
    censor decides on the question.
    """
    if len(payload) < HEADER_LEN:
        return None
    flags = (payload[2] << 8) | payload[3]
    qdcount = (payload[4] << 8) | payload[5]
    if flags & 0x8000 or qdcount == 0:
        return None
    name = _read_name(payload, HEADER_LEN)
    if name is None:
        return None
    labels, pos = name
    if pos + 4 > len(payload):
        return None
    qtype = (payload[pos] << 8) | payload[pos + 1]
    qclass = (payload[pos + 2] << 8) | payload[pos + 3]
    return DnsQuery((payload[0] << 8) | payload[1], flags, name_text(labels), qtype, qclass,
                    qdcount, tuple(labels), pos + 4)


def parse_tcp_query(stream: bytes) -> DnsQuery | None:
    """Parse the first query of a DNS-over-TCP stream (RFC 7766 §8: 2-byte length first).

    Raises :class:`NeedMore` while the stream is a valid prefix of a query message;
    None for a length below a DNS header, a response (QR=1), zero questions or a
    malformed first question. Bytes after the first message (pipelined queries) are
    ignored.
    """
    if len(stream) < 2:
        raise NeedMore
    length = (stream[0] << 8) | stream[1]
    if length < HEADER_LEN:
        return None
    msg = stream[2 : 2 + length]
    if len(msg) < length:
        if len(msg) >= 3 and msg[2] & 0x80:
            return None
        if len(msg) >= 6 and msg[4] == 0 and msg[5] == 0:
            return None
        raise NeedMore
    return parse_query(msg)


MODES = ("exact", "suffix", "substring")


def qname_matches(qname: str, patterns: Iterable[str], mode: str = "suffix") -> str | None:
    """The first pattern (as given) that ``qname`` matches, or None.

    Case-insensitive; trailing dots on either side are ignored. Modes: ``"exact"``;
    ``"suffix"`` — the name or any name below it, on label boundaries (so
    ``example.com`` matches ``www.example.com`` but not ``badexample.com``), the usual
    shape of a DNS blocklist; ``"substring"`` — anywhere in the name, the cruder
    keyword-style rule, which overblocks. Empty patterns are ignored.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: expected one of {MODES}")
    q = qname.lower().rstrip(".")
    for pattern in patterns:
        p = pattern.lower().strip().rstrip(".")
        if not p:
            continue
        if mode == "exact":
            hit = q == p
        elif mode == "suffix":
            hit = q == p or q.endswith("." + p)
        else:
            hit = p in q
        if hit:
            return pattern
    return None


def forge_response(
    query_payload: bytes, addresses: Sequence[str], ttl: int = 60
) -> bytes | None:
    """The DNS response payload a censor injects for ``query_payload``, or None.

    Built with scapy's DNS layer: same ID and opcode, QR=1, AA=1, RD copied, RA=1,
    NOERROR; the first question echoed byte for byte (a resolver that randomises the
    case of the name, "0x20 encoding", checks that); one answer per address, an A
    record for an IPv4 address and AAAA for IPv6, whatever the QTYPE (an injector does
    not care; a wrong-type answer is still poison for a sloppy stub), class IN, the
    given TTL, owner name = the question name.

    None if the query does not parse (:func:`parse_query`) or its name cannot be
    rebuilt exactly (a ``.`` inside a label). Bad ``addresses`` or ``ttl`` are the
    caller's configuration errors and raise ValueError.
    """
    if not 0 <= ttl <= 0x7FFFFFFF:
        raise ValueError(f"ttl {ttl} outside 0..2^31-1 (RFC 2181 §8)")
    ips = [ipaddress.ip_address(a) for a in addresses]
    q = parse_query(query_payload)
    if q is None or any(b"." in lb for lb in q.labels):
        return None
    # Imported here: scapy is slow to import and only the injector needs it.
    from scapy.layers.dns import DNS, DNSQR, DNSRR

    owner = b".".join(q.labels) + b"."
    answers = [DNSRR(rrname=owner, type=QTYPE_A if ip.version == 4 else QTYPE_AAAA,
                     rclass=QCLASS_IN, ttl=ttl, rdata=str(ip)) for ip in ips]
    pkt = DNS(id=q.id, qr=1, opcode=q.opcode, aa=1, rd=int(q.rd), ra=1, rcode=0,
              qd=[DNSQR(qname=owner, qtype=q.qtype, qclass=q.qclass)], an=answers)
    wire = bytes(pkt)
    if wire[HEADER_LEN : q.question_end] != query_payload[HEADER_LEN : q.question_end]:
        return None
    return wire
