"""Captures read in batches and parsed with numpy (censor_sim.pcapbatch): every packet
exactly as the record-by-record reader and censor_sim.packet.parse see it."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.all import (
    IP,
    TCP,
    UDP,
    CookedLinux,
    Dot1Q,
    Ether,
    IPv6,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    Raw,
    wrpcap,
)
from scapy.utils import wrpcapng

from censor_sim import packet, pcapbatch, pcapflows
from tests.support.mixcapture import write_mix


def reference(path) -> list[tuple[float, packet.Packet | None]]:
    return [(ts, packet.parse(raw)) for ts, raw, _ in pcapflows.read_packets(path)]


def batched(path, batch_bytes: int = pcapbatch.BATCH_BYTES) -> list[tuple[float, object]]:
    out: list[tuple[float, object]] = []
    for b in pcapbatch.batches(path, batch_bytes):
        for i in range(b.n):
            if b.kind[i] == pcapbatch.NOT_IP:
                continue
            out.append((b.ts[i], "skip" if b.kind[i] == pcapbatch.SKIP else b.packet(i)))
    return out


def same(ref, got) -> None:
    assert len(ref) == len(got)
    for (ta, pa), (tb, pb) in zip(ref, got, strict=True):
        assert ta == tb
        if pb == "skip":  # never judged: not IP, a fragment, another protocol
            assert pa is None or pa.fragment or pa.proto not in (6, 17), pa
        else:
            assert pa == pb


def edge_packets() -> list:
    c, s = "198.18.0.2", "198.18.5.2"
    pkts = [
        Ether() / IP(src=c, dst=s) / TCP(sport=1, dport=443, flags="S"),
        Ether() / IP(src=c, dst=s, options=b"\x01" * 8) / TCP(dport=80) / Raw(b"x" * 5),
        Ether() / IP(src=c, dst=s) / TCP(dport=80, options=[("Timestamp", (1, 2))]) / Raw(b"y"),
        Ether() / IP(src=c, dst=s) / UDP(sport=5, dport=53) / Raw(b"q" * 30),
        Ether() / IP(src=c, dst=s, flags="MF") / UDP(dport=53) / Raw(b"frag"),
        Ether() / IP(src=c, dst=s, frag=3) / Raw(b"later fragment"),
        Ether() / IP(src=c, dst=s, proto=1) / Raw(b"\x08\x00icmp"),
        Ether() / Dot1Q(vlan=7) / IP(src=c, dst=s) / TCP(dport=443) / Raw(b"vlan"),
        Ether() / Dot1Q(vlan=7) / Dot1Q(vlan=8) / IP(src=c, dst=s) / UDP(dport=9) / Raw(b"q"),
        Ether() / Dot1Q() / Dot1Q() / Dot1Q() / IP(src=c, dst=s) / UDP(dport=9) / Raw(b"3"),
        Ether(type=0x0806) / Raw(b"\x00" * 28),  # ARP: not IP
        Ether() / IPv6(src="2001:db8::1", dst="2001:db8::2") / TCP(dport=443) / Raw(b"six"),
        Ether() / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(dport=443) / Raw(b"q6"),
        Ether() / IPv6(src="2001:db8::1") / IPv6ExtHdrHopByHop() / UDP(dport=1) / Raw(b"e"),
        Ether() / IPv6(src="2001:db8::1") / IPv6ExtHdrFragment(offset=0) / UDP() / Raw(b"f"),
        Ether() / IPv6(src="2001:db8::1", nh=58) / Raw(b"\x80\x00icmp6"),
        Ether() / Raw(bytes(IP(src=c, dst=s) / TCP(dport=1))[:30]),  # cut short
    ]
    for k, p in enumerate(pkts):
        p.time = 100 + k * 0.25
    return pkts


def test_the_realistic_mix_parses_as_packet_by_packet(tmp_path):
    path = tmp_path / "mix.pcap"
    write_mix(path, seed=3, flows=400, span_s=20)
    ref = reference(path)
    same(ref, batched(path))
    same(ref, batched(path, batch_bytes=50_000))  # records cut across many reads


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_every_edge_case_parses_as_packet_by_packet(tmp_path, fmt):
    path = tmp_path / f"edge.{fmt}"
    (wrpcap if fmt == "pcap" else wrpcapng)(str(path), edge_packets())
    same(reference(path), batched(path))


@pytest.mark.parametrize("linktype", [12, 101, 113, 276, 228])
def test_the_other_link_types(tmp_path, linktype):
    c, s = "198.18.0.2", "198.18.5.2"
    ips = [IP(src=c, dst=s) / TCP(dport=443) / Raw(b"a"), IP(src=c, dst=s) / UDP() / Raw(b"b")]
    if linktype == 113:
        frames = [CookedLinux(proto=0x0800) / p for p in ips] + [CookedLinux(proto=0x0806)]
    elif linktype == 276:
        frames = [Raw(b"\x08\x00" + bytes(18) + bytes(p)) for p in ips]
        frames.append(Raw(b"\x08\x06" + bytes(40)))
    else:
        frames = ips
    path = tmp_path / "lt.pcap"
    wrpcap(str(path), frames, linktype=linktype)
    same(reference(path), batched(path))


def record_file(records: list[bytes], linktype: int = 1) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)
    for k, data in enumerate(records):
        out += struct.pack("<IIII", 10 + k, 500_000, len(data), len(data)) + data
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=120), max_size=12),
       st.sampled_from([1, 101]))
def test_random_records_never_crash_and_match(tmp_path_factory, records, linktype):
    """Bytes of any shape: the batch parser agrees with the reference, or marks the
    packet for it."""
    path = tmp_path_factory.mktemp("fuzz") / "r.pcap"
    # Half of them start like an IPv4 or IPv6 header, so the parser gets past the
    # first checks.
    shaped = [(b"\x45" + r if k % 2 else r) for k, r in enumerate(records)]
    if linktype == 1:
        shaped = [b"\x02" * 12 + b"\x08\x00" + r for r in shaped]
    path.write_bytes(record_file(shaped, linktype))
    same(reference(path), batched(path))


def test_a_capture_cut_off_mid_record_ends_at_the_last_whole_one(tmp_path):
    whole = record_file([bytes(IP() / TCP()), bytes(IP() / UDP())], linktype=101)
    path = tmp_path / "cut.pcap"
    path.write_bytes(whole[:-5])
    assert len(batched(path)) == 1


def test_bad_files_are_refused_by_name(tmp_path):
    path = tmp_path / "x.pcap"
    path.write_bytes(b"not a capture at all")
    with pytest.raises(pcapflows.PcapError, match="x.pcap: neither a pcap nor a pcapng"):
        batched(path)
    path.write_bytes(record_file([b"\x00" * 20], linktype=147))
    with pytest.raises(pcapflows.PcapError, match="unsupported link type 147"):
        batched(path)
