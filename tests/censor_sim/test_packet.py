"""Fast header parsing against scapy-built packets (the reference dissector)."""

from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment

from censor_sim import packet


def test_tcp_fields_match_scapy():
    p = IP(src="198.18.0.2", dst="198.18.2.2", ttl=61, id=77) / TCP(
        sport=40000, dport=443, seq=12345, ack=999, flags="PA", window=501) / b"hello"
    pkt = packet.parse(bytes(p))
    assert pkt and pkt.is_tcp
    assert (pkt.src, pkt.dst, pkt.sport, pkt.dport) == ("198.18.0.2", "198.18.2.2", 40000, 443)
    assert (pkt.seq, pkt.ack, pkt.ttl, pkt.ip_id, pkt.window) == (12345, 999, 61, 77, 501)
    assert pkt.has(packet.PSH | packet.ACK) and not pkt.pure_syn
    assert pkt.payload == b"hello" and pkt.dataofs == 5
    assert pkt.tcp_checksum_ok()


def test_bad_checksum_is_seen():
    p = IP(src="198.18.0.2", dst="198.18.2.2") / TCP(sport=1, dport=2, chksum=0x1234) / b"x"
    assert not packet.parse(bytes(p)).tcp_checksum_ok()


def test_udp_and_ipv6():
    p = IPv6(src="2001:db8::2", dst="2001:db8:2::2", hlim=9) / UDP(sport=5, dport=53) / b"q"
    pkt = packet.parse(bytes(p))
    assert pkt and pkt.is_udp and pkt.version == 6 and pkt.ttl == 9
    assert (pkt.src, pkt.dport, pkt.payload) == ("2001:db8::2", 53, b"q")
    assert pkt.tcp_checksum_ok()


def test_syn_and_options():
    p = IP(src="198.18.0.2", dst="198.18.2.2") / TCP(flags="S", options=[("MSS", 1460)])
    pkt = packet.parse(bytes(p))
    assert pkt.pure_syn and pkt.dataofs == 6 and pkt.payload == b""


def test_fragments_carry_no_ports():
    later = IP(src="198.18.0.2", dst="198.18.2.2", frag=10, proto=6) / (b"x" * 40)
    assert packet.parse(bytes(later)).fragment and not packet.parse(bytes(later)).is_tcp
    p6 = IPv6(src="2001:db8::2", dst="2001:db8:2::2") / IPv6ExtHdrFragment(offset=5, nh=6) / b"y"
    assert packet.parse(bytes(p6)).fragment


@settings(max_examples=400)
@given(st.binary(max_size=120))
def test_garbage_never_raises(data):
    pkt = packet.parse(data)
    assert pkt is None or pkt.version in (4, 6)
