"""NFLOG copies and ctnetlink marks: the tap censor's framing, without a kernel."""

from __future__ import annotations

import ipaddress
import socket
import struct
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from censor_sim import ctmark, netlink, nflog

IP_PACKET = bytes.fromhex("4500001c00010000401100000a0000010a000002") + b"\x13\x88\x1b\x58"


def packet_message(group: int, payload: bytes, seq: int = 1) -> bytes:
    """One NFULNL_MSG_PACKET as the kernel lays it out: header, then payload last."""
    attrs = (netlink.attr(1, struct.pack("!HBx", 0x0800, 2))  # NFULA_PACKET_HDR
             + netlink.attr(4, struct.pack("!I", 7))  # the input interface
             + netlink.attr(2, struct.pack("!I", 0))  # the mark
             + netlink.attr(nflog.ATTR_PAYLOAD, payload))
    return netlink.message(nflog.MSG_PACKET, 0, seq, 2, group, attrs)


def test_a_datagram_of_copies_gives_each_group_and_packet_in_order():
    buf = packet_message(10, IP_PACKET) + packet_message(11, b"\x45" * 41, 2)
    assert nflog.parse(buf) == [(10, IP_PACKET), (11, b"\x45" * 41)]


def test_what_is_not_a_copy_is_skipped():
    ack = netlink.message(netlink.NLMSG_ERROR, 0, 1, 0, 0, b"\0" * 4)
    no_payload = netlink.message(nflog.MSG_PACKET, 0, 2, 2, 10, netlink.attr(4, b"\0" * 4))
    assert nflog.parse(ack + no_payload + packet_message(10, b"x")) == [(10, b"x")]


def test_a_truncated_datagram_yields_only_its_whole_copies():
    whole = packet_message(10, IP_PACKET)
    buf = whole + packet_message(11, IP_PACKET)
    assert nflog.parse(buf[:-3]) == [(10, IP_PACKET)]
    assert nflog.parse(whole[:10]) == []


@given(st.binary(max_size=600))
def test_parse_never_raises_on_any_bytes(buf):
    for group, payload in nflog.parse(buf):
        assert 0 <= group < 65536 and len(payload) <= len(buf)
    for _kind, _seq, start, end in netlink.messages(buf):
        assert 0 <= start <= end <= len(buf)
        for a, b in netlink.attributes(buf, start, end).values():
            assert start <= a <= b <= end


@given(st.binary(max_size=200), st.integers(0, 65535))
def test_a_copy_round_trips_whatever_it_carries(payload, group):
    assert nflog.parse(packet_message(group, payload)) == [(group, payload)]


def test_a_mark_message_names_the_tuple_the_mark_and_its_mask():
    t = ("198.18.0.2", "198.18.5.2", 6, 40000, 443)
    msg = ctmark.mark_message(9, t, 0x20, 0x70)
    [(kind, seq, start, end)] = list(netlink.messages(msg))
    assert (kind, seq) == (ctmark.MSG_CT_NEW, 9)
    family = msg[start]
    assert family == 2  # AF_INET
    attrs = netlink.attributes(msg, start + 4, end)
    a, b = attrs[ctmark.CTA_MARK]
    assert struct.unpack("!I", msg[a:b]) == (0x20,)
    a, b = attrs[ctmark.CTA_MARK_MASK]
    assert struct.unpack("!I", msg[a:b]) == (0x70,)
    a, b = attrs[ctmark.CTA_TUPLE_ORIG]
    parts = netlink.attributes(msg, a, b)
    ia, ib = parts[ctmark.CTA_TUPLE_IP]
    ips = netlink.attributes(msg, ia, ib)
    assert [str(ipaddress.ip_address(msg[x:y])) for x, y in
            (ips[ctmark.CTA_IP_V4_SRC], ips[ctmark.CTA_IP_V4_DST])] == list(t[:2])
    pa, pb = parts[ctmark.CTA_TUPLE_PROTO]
    proto = netlink.attributes(msg, pa, pb)
    x, y = proto[ctmark.CTA_PROTO_NUM]
    assert msg[x:y] == b"\x06"
    x, y = proto[ctmark.CTA_PROTO_SRC_PORT]
    assert struct.unpack("!H", msg[x:y]) == (40000,)
    x, y = proto[ctmark.CTA_PROTO_DST_PORT]
    assert struct.unpack("!H", msg[x:y]) == (443,)


def test_a_mark_outside_its_mask_is_cut_to_it_and_v6_uses_v6_attributes():
    msg = ctmark.mark_message(1, ("2001:db8::1", "2001:db8::2", 17, 1, 2), 0x1FF, 0x70,
                              reply=True)
    [(_, _, start, end)] = list(netlink.messages(msg))
    assert msg[start] == 10  # AF_INET6
    attrs = netlink.attributes(msg, start + 4, end)
    assert ctmark.CTA_TUPLE_REPLY in attrs and ctmark.CTA_TUPLE_ORIG not in attrs
    a, b = attrs[ctmark.CTA_MARK]
    assert struct.unpack("!I", msg[a:b]) == (0x70,)
    ta, tb = attrs[ctmark.CTA_TUPLE_REPLY]
    ia, ib = netlink.attributes(msg, ta, tb)[ctmark.CTA_TUPLE_IP]
    assert set(netlink.attributes(msg, ia, ib)) == {ctmark.CTA_IP_V6_SRC, ctmark.CTA_IP_V6_DST}


def test_an_error_message_carries_its_errno():
    # As the kernel sends it: a netlink header, the negative errno, the request's header.
    body = struct.pack("=i", -2) + struct.pack("=IHHII", 20, 0x100, 5, 1, 0)
    msg = struct.pack("=IHHII", 16 + len(body), netlink.NLMSG_ERROR, 0, 1, 0) + body
    [(kind, seq, start, end)] = list(netlink.messages(msg))
    assert (kind, seq) == (netlink.NLMSG_ERROR, 1)
    assert netlink.error_code(msg, start, end) == 2
    ack = struct.pack("=IHHII", 20, netlink.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", 0)
    assert netlink.error_code(ack, 16, 20) == 0


def test_the_reader_takes_each_datagram_whole_through_its_one_buffer():
    """Reader.read receives into one buffer it keeps: a long datagram then a short
    one must not leave the first's bytes in the second's copies."""
    ours, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ours.setblocking(False)
    reader = object.__new__(nflog.Reader)
    reader.sock, reader.overruns = SimpleNamespace(sock=ours), 0
    reader._view = memoryview(bytearray(262144))
    try:
        long_one = b"\x45" + bytes(range(256)) * 8
        kernel.send(packet_message(10, long_one) + packet_message(11, IP_PACKET, 2))
        kernel.send(packet_message(11, b"\x45\x01", 3))
        assert reader.read() == [(10, long_one), (11, IP_PACKET), (11, b"\x45\x01")]
        assert reader.read() == []  # nothing waiting: no copies, no error
    finally:
        ours.close()
        kernel.close()
