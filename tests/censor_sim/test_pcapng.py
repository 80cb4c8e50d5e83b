"""pcapng captures (censor_sim.pcapng), read as classic pcaps are."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.all import IP, TCP, UDP, Ether, Raw, wrpcap
from scapy.utils import wrpcapng

from censor_sim.offline import replay
from censor_sim.pcapflows import PcapError, read_packets
from censor_sim.profile import load_profile

C, S = "198.18.0.2", "198.18.3.2"


def block(btype: int, body: bytes, endian: str = "<") -> bytes:
    body += b"\x00" * (-len(body) % 4)
    n = struct.pack(endian + "I", len(body) + 12)
    return struct.pack(endian + "I", btype) + n + body + n


def shb(endian: str = "<", major: int = 1) -> bytes:
    return block(0x0A0D0D0A, struct.pack(endian + "IHHq", 0x1A2B3C4D, major, 0, -1), endian)


def option(code: int, value: bytes, endian: str = "<") -> bytes:
    return struct.pack(endian + "HH", code, len(value)) + value + b"\x00" * (-len(value) % 4)


def idb(linktype: int, endian: str = "<", snaplen: int = 0, options: bytes = b"") -> bytes:
    if options:
        options += option(0, b"", endian)
    return block(1, struct.pack(endian + "HHI", linktype, 0, snaplen) + options, endian)


def epb(if_id: int, ticks: int, data: bytes, endian: str = "<", orig: int | None = None) -> bytes:
    return block(6, struct.pack(endian + "IIIII", if_id, ticks >> 32, ticks & 0xFFFFFFFF,
                                len(data), len(data) if orig is None else orig) + data, endian)


def ip_packet(sport: int, payload: bytes = b"hello") -> bytes:
    return bytes(IP(src=C, dst=S) / TCP(sport=sport, dport=443, flags="PA") / Raw(payload))


def read(tmp_path, data: bytes) -> list[tuple[float, bytes, int]]:
    path = tmp_path / "c.pcapng"
    path.write_bytes(data)
    return list(read_packets(path))


def test_scapys_pcapng_reads_as_its_classic_pcap(tmp_path):
    rng = random.Random(3)
    pkts = []
    for i in range(20):
        p = Ether() / IP(src=C, dst=S) / TCP(sport=40000 + i, dport=443) / Raw(rng.randbytes(i))
        p.time = 1_790_000_000 + i * 0.001234
        pkts.append(p)
    wrpcap(str(tmp_path / "a.pcap"), pkts)
    wrpcapng(str(tmp_path / "a.pcapng"), pkts)
    classic = list(read_packets(tmp_path / "a.pcap"))
    ng = list(read_packets(tmp_path / "a.pcapng"))
    assert [(ip, orig) for _, ip, orig in ng] == [(ip, orig) for _, ip, orig in classic]
    assert all(abs(a[0] - b[0]) < 1e-6 for a, b in zip(ng, classic, strict=True))


def test_sections_interfaces_resolutions_and_block_kinds(tmp_path):
    """Big-endian, then little-endian; two interfaces of different link types, one
    ticking in 2^-10 s with an offset; a simple packet block (cut to its interface's
    snap length) takes the previous packet's time; name-resolution and statistics
    blocks are skipped."""
    def eth(ip: bytes) -> bytes:
        return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02",
                           type=0x0800)) + ip

    resol = option(9, bytes([0x80 | 10]), ">") + option(14, struct.pack(">q", 100), ">")
    data = (shb(">") + idb(1, ">", snaplen=40) + idb(101, ">", options=resol)
            + block(4, b"\x00" * 8, ">")                             # name resolution
            + epb(0, 2_500_000, eth(ip_packet(1)), ">")              # 2.5 s in microseconds
            + epb(1, 3 * 1024, ip_packet(2), ">")                    # 3 s + 100 s offset
            + block(3, struct.pack(">I", 59) + eth(ip_packet(3))[:40], ">")  # simple
            + block(5, b"\x00" * 12, ">")                            # interface statistics
            # A new section forgets the old one's interfaces.
            + shb("<") + idb(101, "<", options=option(9, bytes([9])))
            + epb(0, 7_000_000_000, ip_packet(4), "<")
            + block(2, struct.pack("<HHIIII", 0, 0, 8_000_000_000 >> 32,
                                   8_000_000_000 & 0xFFFFFFFF, len(ip_packet(5)), 999)
                    + ip_packet(5), "<"))
    got = read(tmp_path, data)
    assert [ip for _, ip, _ in got] == [ip_packet(1), ip_packet(2), ip_packet(3)[:26],
                                        ip_packet(4), ip_packet(5)]
    # The last: an obsolete packet block, its 64-bit time split over two words.
    assert [t for t, _, _ in got] == [2.5, 103.0, 103.0, 7.0, 8.0]
    assert got[2][2] == 45 and got[4][2] == 999  # original IP lengths as recorded


def test_a_file_cut_off_mid_block_ends_at_the_last_whole_one(tmp_path):
    whole = shb() + idb(101) + epb(0, 1, ip_packet(1)) + epb(0, 2, ip_packet(2))
    assert len(read(tmp_path, whole[:-10])) == 1
    assert len(read(tmp_path, whole)) == 2


@pytest.mark.parametrize(("data", "message"), [
    (shb() + epb(0, 1, ip_packet(1)), "packet of interface 0, but the section describes 0"),
    (shb(major=2), "pcapng version 2, not 1"),
    (shb() + idb(147) + epb(0, 1, b"\x00" * 20), "unsupported link type 147"),
    (shb() + idb(101) + epb(0, 1, ip_packet(1))[:-4] + b"\xff\xff\xff\xff",
     "trailing length differs"),
    (shb() + b"\x06\x00\x00\x00\x0d\x00\x00\x00", "block length 13"),
    (b"\x0a\x0d\x0d\x0a" + bytes(40), "without the byte-order magic"),
    (shb() + idb(101) + block(6, struct.pack("<IIIII", 0, 0, 0, 500, 500)),
     "captured length 500 overruns its block"),
])
def test_malformed_files_are_refused_by_name(tmp_path, data, message):
    with pytest.raises(PcapError, match=message) as err:
        read(tmp_path, data)
    assert str(err.value).startswith("c.pcapng: ")


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_after_a_valid_header_never_crashes(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("ng") / "g.pcapng"
    path.write_bytes(shb() + idb(1) + blob)
    try:
        for ts, ip, orig in read_packets(path):
            assert isinstance(ts, float) and isinstance(ip, bytes) and isinstance(orig, int)
    except PcapError:
        pass


def test_the_censor_judges_a_pcapng_as_it_judges_the_same_pcap(tmp_path):
    rng = random.Random(1)
    pkts = []
    for i, payload in enumerate([rng.randbytes(300), b"GET / HTTP/1.1\r\n\r\n",
                                 rng.randbytes(300)]):
        sport, t0 = 40000 + i, 10.0 + i
        conn = [Ether() / IP(src=C, dst=S) / TCP(sport=sport, dport=9850, flags="S", seq=100),
                Ether() / IP(src=S, dst=C) / TCP(sport=9850, dport=sport, flags="SA", seq=500,
                                                 ack=101),
                Ether() / IP(src=C, dst=S) / TCP(sport=sport, dport=9850, flags="A", seq=101,
                                                 ack=501),
                Ether() / IP(src=C, dst=S) / TCP(sport=sport, dport=9850, flags="PA", seq=101,
                                                 ack=501) / Raw(payload)]
        for j, p in enumerate(conn):
            p.time = t0 + 0.001 * j
        pkts += conn
    pkts.append(Ether() / IP(src=C, dst="198.18.8.2") / UDP(sport=5353, dport=53) / Raw(b"q"))
    pkts[-1].time = 20.0
    wrpcap(str(tmp_path / "x.pcap"), pkts)
    wrpcapng(str(tmp_path / "x.pcapng"), pkts)
    fet = load_profile("gfw-fet-2021", {"policy": {"rules": [
        {"detector": "fet", "action": "residual", "probability": 1.0}]}})
    classic = [v.to_json() for v in replay(fet, tmp_path / "x.pcap")]
    ng = [v.to_json() for v in replay(fet, tmp_path / "x.pcapng")]
    assert ng == classic
    assert [v["verdict"] for v in ng] == ["residual", "dropped-by-residual",
                                          "dropped-by-residual", "pass"]
