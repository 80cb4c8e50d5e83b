"""Conntrack marks written from userspace: how the tap censor's decisions reach
the kernel.

An in-path censor marks the packet it holds and nftables copies the mark into
the connection. A tap holds nothing, so it updates the connection itself:
an ``IPCTNL_MSG_CT_NEW`` message without ``NLM_F_CREATE`` changes an existing
entry (here only the bits of the flow mask, through ``CTA_MARK_MASK``), and
the nftables rules that already enforce flow marks act on the connection's
next packet. Messages for a batch of packets go in one ``sendmsg``.

Protocol: ``linux/netfilter/nfnetlink_conntrack.h``.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct

from . import netlink

NFNL_SUBSYS_CTNETLINK = 1
MSG_CT_NEW = NFNL_SUBSYS_CTNETLINK << 8 | 0
CTA_TUPLE_ORIG, CTA_TUPLE_REPLY, CTA_MARK, CTA_MARK_MASK = 1, 2, 8, 21
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_IP_V4_SRC, CTA_IP_V4_DST, CTA_IP_V6_SRC, CTA_IP_V6_DST = 1, 2, 3, 4
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT = 1, 2, 3

Tuple = tuple[str, str, int, int, int]  # src, dst, protocol, source port, dest port


def tuple_attr(kind: int, t: Tuple) -> bytes:
    src, dst, proto, sport, dport = t
    a, b = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if a.version == 4:
        ips = (netlink.attr(CTA_IP_V4_SRC, a.packed) + netlink.attr(CTA_IP_V4_DST, b.packed))
    else:
        ips = (netlink.attr(CTA_IP_V6_SRC, a.packed) + netlink.attr(CTA_IP_V6_DST, b.packed))
    l4 = (netlink.attr(CTA_PROTO_NUM, bytes([proto]))
          + netlink.attr(CTA_PROTO_SRC_PORT, struct.pack("!H", sport))
          + netlink.attr(CTA_PROTO_DST_PORT, struct.pack("!H", dport)))
    return netlink.nested(kind, netlink.nested(CTA_TUPLE_IP, ips),
                          netlink.nested(CTA_TUPLE_PROTO, l4))


def mark_message(seq: int, t: Tuple, mark: int, mask: int, reply: bool = False) -> bytes:
    """Set the bits ``mask`` of the connection whose original (or, with
    ``reply``, reply) direction is ``t`` to those of ``mark``."""
    family = socket.AF_INET if ipaddress.ip_address(t[0]).version == 4 else socket.AF_INET6
    # The kernel computes (old & ~mask) ^ mark, so the mark must lie inside the mask.
    attrs = (tuple_attr(CTA_TUPLE_REPLY if reply else CTA_TUPLE_ORIG, t)
             + netlink.attr(CTA_MARK, struct.pack("!I", mark & mask))
             + netlink.attr(CTA_MARK_MASK, struct.pack("!I", mask)))
    return netlink.message(MSG_CT_NEW, netlink.NLM_F_REQUEST | netlink.NLM_F_ACK, seq,
                           family, 0, attrs)


class Marker:
    """Writes flow marks into the namespace's conntrack table."""

    def __init__(self, mask: int) -> None:
        self.mask = mask
        self.sock = netlink.Socket()
        self.written = 0
        self.missing = 0  # connections already gone (or never tracked)

    def mark(self, flows: list[tuple[Tuple, int]]) -> list[bool]:
        """Mark each (tuple as first seen, mark); True where the kernel took it.

        The tuple is tried as the connection's original direction, then as
        its reply direction: the censor names a flow by who spoke first in
        its view, conntrack by who sent the first packet it tracked."""
        if not flows:
            return []
        seq = self.sock.next_seq
        codes = self.sock.request([mark_message(seq(), t, m, self.mask) for t, m in flows])
        retry = [i for i, c in enumerate(codes) if c == errno.ENOENT]
        if retry:
            again = self.sock.request([mark_message(seq(), flows[i][0], flows[i][1], self.mask,
                                                    reply=True) for i in retry])
            for i, c in zip(retry, again, strict=True):
                codes[i] = c
        for c in codes:
            if c and c != errno.ENOENT:
                netlink.check(c, "setting a conntrack mark")
        ok = [c == 0 for c in codes]
        self.written += sum(ok)
        self.missing += len(ok) - sum(ok)
        return ok

    def close(self) -> None:
        self.sock.close()
