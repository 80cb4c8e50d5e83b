"""Netfilter's netlink framing (nfnetlink), by hand.

The tap censor reads NFLOG copies and writes conntrack marks tens of
thousands of times a second. Both are a few fixed binary structures, so they
are packed and read here with ``struct`` rather than through a general
netlink library, whose per-attribute objects would cost more than the
censor's whole budget per packet.

Layouts (Linux uapi): ``linux/netlink.h`` (``nlmsghdr``, ``nlattr``, errors)
and ``linux/netfilter/nfnetlink.h`` (``nfgenmsg``; the message type is the
subsystem shifted left 8 bits, or'ed with the subsystem's message).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterator

NETLINK_NETFILTER = 12
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF

_HDR = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, port id
_NFGEN = struct.Struct("!BBH")  # nfgenmsg: family, version, resource id (big-endian)
_ATTR = struct.Struct("=HH")  # nlattr: length, type
HDR_LEN = _HDR.size + _NFGEN.size


class NetlinkError(OSError):
    """The kernel refused a request (its errno), or a reply made no sense."""


def _align(n: int) -> int:
    return (n + 3) & ~3


def attr(kind: int, value: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    body = _ATTR.pack(_ATTR.size + len(value), kind) + value
    return body + b"\0" * (_align(len(body)) - len(body))


def nested(kind: int, *attrs: bytes) -> bytes:
    return attr(kind | NLA_F_NESTED, b"".join(attrs))


def message(msg_type: int, flags: int, seq: int, family: int, res_id: int,
            attrs: bytes) -> bytes:
    """One nfnetlink message: the netlink header, ``nfgenmsg`` and its attributes."""
    return (_HDR.pack(HDR_LEN + len(attrs), msg_type, flags, seq, 0)
            + _NFGEN.pack(family, 0, res_id) + attrs)


def messages(buf: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(type, seq, start, end) of each message in a datagram: ``buf[start:end]``
    is the message after its netlink header. A truncated or overlong length
    ends the walk (the kernel never sends one; a fuzzer may)."""
    off, n = 0, len(buf)
    unpack = _HDR.unpack_from
    while off + _HDR.size <= n:
        length, kind, _flags, seq, _pid = unpack(buf, off)
        if length < _HDR.size or off + length > n:
            return
        yield kind, seq, off + _HDR.size, off + length
        off += _align(length)


def _walk(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(type, value start, value end) of each attribute in ``buf[start:end]``; a
    truncated or overlong length ends the walk."""
    unpack = _ATTR.unpack_from
    off = start
    while off + 4 <= end:
        length, kind = unpack(buf, off)
        if length < 4 or off + length > end:
            return
        yield kind & NLA_TYPE_MASK, off + 4, off + length
        off += _align(length)


def attributes(buf: bytes, start: int, end: int) -> dict[int, tuple[int, int]]:
    """{type: (start, end)} of the attributes in ``buf[start:end]`` (offsets, so
    nothing is copied until a caller slices what it needs)."""
    return {kind: (a, b) for kind, a, b in _walk(buf, start, end)}


def find_attribute(buf: bytes, start: int, end: int, kind: int) -> tuple[int, int] | None:
    """(start, end) of the first attribute of type ``kind``, or None: for a hot
    path that needs one attribute and can stop there."""
    # A plain loop, not _walk: the tap calls this once per packet it sees.
    unpack = _ATTR.unpack_from
    off = start
    while off + 4 <= end:
        length, k = unpack(buf, off)
        if length < 4 or off + length > end:
            return None
        if k & NLA_TYPE_MASK == kind:
            return off + 4, off + length
        off += (length + 3) & ~3
    return None


def error_code(buf: bytes, start: int, end: int) -> int:
    """The errno an ``NLMSG_ERROR`` carries (0 for an acknowledgement)."""
    if end - start < 4:
        raise NetlinkError(errno.EPROTO, "short netlink error message")
    return -struct.unpack_from("=i", buf, start)[0]


class Socket:
    """A non-blocking ``NETLINK_NETFILTER`` socket with request/acknowledge."""

    def __init__(self, rcvbuf: int = 0) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK,
                                  NETLINK_NETFILTER)
        self.sock.bind((0, 0))
        if rcvbuf:
            # SO_RCVBUFFORCE passes rmem_max for root; fall back to what is allowed.
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)  # SO_RCVBUFFORCE
            except OSError:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.seq = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        return self.seq

    def request(self, msgs: list[bytes], timeout: float = 2.0) -> list[int]:
        """Send messages (each asking for an acknowledgement) in one datagram and
        return each one's errno, in order (0: done). Other traffic on the socket
        that arrives meanwhile (NFLOG copies) is not this call's to read, so a
        socket that carries both must not use it; the tap's sockets are separate."""
        seqs = [struct.unpack_from("=I", m, 8)[0] for m in msgs]
        self.sock.sendall(b"".join(msgs))
        pending = {s: -1 for s in seqs}
        self.sock.settimeout(timeout)
        try:
            while any(v < 0 for v in pending.values()):
                buf = self.sock.recv(65536)
                for kind, seq, start, end in messages(buf):
                    if kind == NLMSG_ERROR and seq in pending:
                        pending[seq] = error_code(buf, start, end)
        except TimeoutError as exc:
            raise NetlinkError(errno.ETIMEDOUT, "no answer from the kernel's netlink") from exc
        finally:
            self.sock.setblocking(False)
        return [pending[s] for s in seqs]


def check(code: int, what: str) -> None:
    if code:
        raise NetlinkError(code, f"{what}: {os.strerror(code)}")
