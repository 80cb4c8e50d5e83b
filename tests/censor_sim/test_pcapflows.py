"""Flows from a pcap, oriented and logged the way the live censor logs them."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from censor_sim.pcapflows import PcapError, flows_from_pcap, read_packets

C, S = "198.18.0.2", "198.18.5.2"


def pkt(src, dst, sport, dport, flags="A", payload=b"", t=0.0, v6=False):
    ip = IPv6(src=src, dst=dst) if v6 else IP(src=src, dst=dst)
    p = Ether() / ip / TCP(sport=sport, dport=dport, flags=flags) / payload
    p.time = t
    return p


def conversation(cport=40000, t0=100.0, data=b"x" * 1000, src=C, dst=S, v6=False):
    return [pkt(src, dst, cport, 443, "S", t=t0, v6=v6),
            pkt(dst, src, 443, cport, "SA", t=t0 + 0.001, v6=v6),
            pkt(src, dst, cport, 443, "A", t=t0 + 0.002, v6=v6),
            pkt(src, dst, cport, 443, "PA", data, t=t0 + 0.003, v6=v6),
            pkt(dst, src, 443, cport, "PA", b"y" * 50, t=t0 + 0.010, v6=v6)]


def test_flows_are_oriented_and_timed(tmp_path):
    path = tmp_path / "a.pcap"
    wrpcap(str(path), conversation() + conversation(40001, 101.0)
           + conversation(40002, 102.0, src="2001:db8::2", dst="2001:db8:5::2", v6=True))
    flows = flows_from_pcap(path, ["198.18.0.0/24", "2001:db8::/64"])
    assert [f.key[3] for f in flows] == [40000, 40001, 40002]
    f = flows[0]
    assert (f.client, f.server, f.server_port, f.packets) == (C, S, 443, 5)
    log = f.log.packets
    assert [p.direction for p in log] == [1, -1, 1, 1, -1]
    assert [p.length for p in log] == [0, 0, 0, 1000, 50]
    assert log[3].ts == pytest.approx(0.003) and log[3].data == b"x" * 1000
    assert flows[2].client == "2001:db8::2"


def truncate(path, snaplen: int) -> None:
    """Cut every record to `snaplen` bytes, keeping its original length (tcpdump -s)."""
    raw = path.read_bytes()
    out, off = bytearray(raw[:24]), 24
    while off < len(raw):
        sec, frac, incl, orig = struct.unpack_from("<IIII", raw, off)
        data = raw[off + 16:off + 16 + incl][:snaplen]
        out += struct.pack("<IIII", sec, frac, len(data), orig) + data
        off += 16 + incl
    path.write_bytes(bytes(out))


def test_a_short_snaplen_keeps_the_wire_length(tmp_path):
    path = tmp_path / "b.pcap"
    wrpcap(str(path), conversation())
    truncate(path, 100)
    log = flows_from_pcap(path, [C])[0].log.packets
    assert log[3].length == 1000 and len(log[3].data) == 100 - 14 - 20 - 20


def test_mid_stream_flows_and_strangers_are_skipped(tmp_path):
    path = tmp_path / "c.pcap"
    mid = conversation(40003)[2:]  # no SYN: began before the capture
    other = conversation(40004, src="198.18.9.9", dst=S)  # not a client address
    wrpcap(str(path), mid + other + [Ether() / IP(src=C, dst=S) / UDP(sport=5, dport=53)])
    assert flows_from_pcap(path, [C]) == []


def test_window_limits_the_log_but_not_the_count(tmp_path):
    path = tmp_path / "d.pcap"
    extra = [pkt(C, S, 40000, 443, "PA", b"z", t=101 + i) for i in range(40)]
    wrpcap(str(path), conversation() + extra)
    f = flows_from_pcap(path, [C], window=30)[0]
    assert len(f.log) == 30 and f.packets == 45


def test_not_a_pcap(tmp_path):
    p = tmp_path / "x.pcap"
    p.write_bytes(b"GIF89a" + bytes(40))
    with pytest.raises(PcapError, match="x.pcap: neither a pcap nor a pcapng file"):
        list(read_packets(p))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400))
def test_garbage_records_never_crash(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("fuzz") / "f.pcap"
    rng = random.Random(len(blob))
    good = conversation()
    wrpcap(str(path), good)
    raw = bytearray(path.read_bytes())
    raw += blob  # a torn or garbage tail after valid records
    if len(raw) > 60 and rng.random() < 0.5:
        raw[40 + rng.randrange(len(raw) - 40)] ^= 0xFF  # and a flipped byte inside
    path.write_bytes(bytes(raw))
    try:
        flows_from_pcap(path, [C])
    except PcapError:
        pass
