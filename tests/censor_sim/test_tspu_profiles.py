"""Russia's TSPU rules of 2022–2024 through the engine: QUIC by size, ECH by SNI and
extension (docs/censors/russia.md §5.3)."""

from __future__ import annotations

import random

import pytest

from censor_sim.detectors import dtls
from censor_sim.engine import Engine
from censor_sim.profile import load_profile
from tests.support import dtls_vectors as dv
from tests.support import quic_vectors as qv
from tests.support.engine import CLIENT, SERVER, Clock, connect, udp
from tests.support.tlsrecords import crafted_client_hello


def engine(name: str) -> Engine:
    return Engine(load_profile(name), clock=Clock(), rng=random.Random(0))


@pytest.mark.parametrize(("size", "blocked"), [(1000, False), (1001, True), (1200, True)])
def test_tspu_quic_2022_filters_from_1001_bytes(size, blocked):
    eng = engine("tspu-quic-2022")
    assert eng.handle(udp(CLIENT, SERVER, 50000, 443, qv.long_header(size)), True).drop is blocked


@pytest.mark.parametrize(("sport", "dport", "version", "blocked"), [
    (50000, 443, 1, True),
    (443, 443, 1, False),       # "not when the source port is 443"
    (50000, 8443, 1, False),    # port 443 only
    (50000, 443, 0x6B3343CF, False),  # QUIC v2: not 00 00 00 01 at offset 1
])
def test_tspu_quic_2022_ports_and_version(sport, dport, version, blocked):
    eng = engine("tspu-quic-2022")
    got = eng.handle(udp(CLIENT, SERVER, sport, dport, qv.long_header(1200, version)), True)
    assert got.drop is blocked


def test_tspu_quic_2022_is_not_sni_based_and_filters_every_datagram():
    eng = engine("tspu-quic-2022")
    # A domestic-looking name is blocked all the same.
    assert eng.handle(udp(CLIENT, SERVER, 50001, 443, qv.build_initial("vk.lab")), True).drop
    # Something small first does not help: it is a packet filter.
    assert not eng.handle(udp(CLIENT, SERVER, 50002, 443, b"\x40" + bytes(50)), True).drop
    assert eng.handle(udp(CLIENT, SERVER, 50002, 443, qv.long_header(1200)), True).drop


@pytest.mark.parametrize(("first", "size", "blocked"), [
    (0xC0, 1001, True), (0x40, 1001, True), (0x00, 1001, True), (0x40, 1000, False)])
def test_tspu_quic_2022_reads_the_version_bytes_whatever_the_first_byte(first, size, blocked):
    """ValdikSS, IETF QUIC list (March 2022): "Filter seeks for "00 00 00 01" ... in the
    UDP payload starting from the second byte"; the pseudo-rule is "filesize > 1000
    and dport == 443 and int32be(1) == 0x00000001", with no test of the first byte."""
    payload = bytes([first]) + b"\x00\x00\x00\x01" + bytes(size - 5)
    eng = engine("tspu-quic-2022")
    assert eng.handle(udp(CLIENT, SERVER, 50000, 443, payload), True).drop is blocked


@pytest.mark.parametrize(("sni", "ech", "blocked"), [
    ("cloudflare-ech.com", True, True),
    ("cloudflare-ech.com", False, False),  # the name alone
    ("defo.ie", True, False),              # ECH with another public name
    ("www.cloudflare-ech.com", True, False),  # exact name only
])
def test_tspu_ech_2024_over_tls(sni, ech, blocked):
    eng = engine("tspu-ech-2024")
    assert connect(eng, 40000, 443, crafted_client_hello(sni, ech)).drop is blocked
    assert not connect(eng, 40001, 443, b"GET / HTTP/1.1\r\n\r\n").drop


def test_tspu_ech_2024_over_quic():
    eng = engine("tspu-ech-2024")
    ech = qv.build_initial("blocked.lab", "ech-outer")  # outer SNI cloudflare-ech.com + ECH
    assert eng.handle(udp(CLIENT, SERVER, 50000, 443, ech), True).drop
    plain = qv.build_initial("cloudflare-ech.com")
    assert not eng.handle(udp(CLIENT, SERVER, 50001, 443, plain), True).drop


def freeze_engine(servers=(SERVER,)) -> Engine:
    prof = load_profile("tspu-freeze-2025", {"detectors": {"tls": {"servers": list(servers)}}})
    return Engine(prof, clock=Clock(), rng=random.Random(0))


def test_tspu_freeze_2025_marks_tls13_to_listed_ranges_only():
    assert connect(freeze_engine(), 40000, 443, crafted_client_hello("a.lab")).flow == "freeze"
    # Another server, or a hello that does not offer TLS 1.3: untouched.
    other = connect(freeze_engine(["198.18.9.0/24"]), 40000, 443, crafted_client_hello("a.lab"))
    assert other.flow == "accept"
    tls12 = crafted_client_hello("a.lab").replace(b"\x00\x2b\x00\x03\x02\x03\x04",
                                                  b"\x00\x2b\x00\x03\x02\x03\x03")
    assert connect(freeze_engine(), 40001, 443, tls12).flow == "accept"
    assert not connect(freeze_engine(), 40002, 443, b"SSH-2.0-x\r\n").flow == "freeze"


def test_the_kernel_rule_drops_only_the_servers_packets_past_the_byte_count():
    from censor_sim import datapath

    rules = datapath.ruleset(None, freeze_bytes=16384, inside="ptlc-in")
    assert ('oifname "ptlc-in" ct mark & 0x70 == 0x30 ct reply bytes > 16384 '
            "counter name freeze_drop drop") in rules
    assert "freeze_drop drop" not in datapath.ruleset(None)


def freeze_capture(path, server_data: list[int], server: str = SERVER, hello: bytes = b"",
                   start: float = 10.0) -> None:
    """One TLS connection in a capture: handshake, the client's hello, then the
    server's data in segments of the sizes given (TCP payload bytes), each followed
    by the client's ACK."""
    from scapy.all import IP, TCP, Raw, wrpcap

    hello = hello or crafted_client_hello("site.lab")
    pkts = [IP(src=CLIENT, dst=server) / TCP(sport=40000, dport=443, flags="S", seq=1),
            IP(src=server, dst=CLIENT) / TCP(sport=443, dport=40000, flags="SA", seq=9, ack=2),
            IP(src=CLIENT, dst=server) / TCP(sport=40000, dport=443, flags="A", seq=2, ack=10),
            IP(src=CLIENT, dst=server) / TCP(sport=40000, dport=443, flags="PA", seq=2,
                                             ack=10) / Raw(hello)]
    seq = 10
    for size in server_data:
        pkts.append(IP(src=server, dst=CLIENT) / TCP(sport=443, dport=40000, flags="PA",
                                                     seq=seq, ack=2 + len(hello))
                    / Raw(b"\x17" * size))
        seq += size
        pkts.append(IP(src=CLIENT, dst=server) / TCP(sport=40000, dport=443, flags="A",
                                                     seq=2 + len(hello), ack=seq))
    for k, pkt in enumerate(pkts):
        pkt.time = start + 0.001 * k
    wrpcap(str(path), pkts)


def replay_freeze(path, servers=(SERVER,)):
    from censor_sim.offline import replay

    prof = load_profile("tspu-freeze-2025", {"detectors": {"tls": {"servers": list(servers)}}})
    (only,) = replay(prof, path)
    return only


# The server's IP bytes before its data: the SYN+ACK (40 bytes).
SYNACK = 40


@pytest.mark.parametrize("total", [8192, 16384])
def test_a_flow_the_server_sent_no_more_than_the_threshold_passes_undetected(tmp_path, total):
    """net4people/bbs#490: "the data size received from the server to the client is
    more than ≈15-20KB ... the MAIN thing"; the kernel rule drops past
    actions.freeze.bytes (16,384) IP bytes, "ct reply bytes > 16384". A flow whose
    server sent 8 KB, or exactly 16,384 bytes, was never frozen: it passes, is no
    detection, and says which rule waited and how far it got (issue 46, item 3)."""
    data = total - SYNACK - 40  # one segment: its IP and TCP headers are 40 bytes
    freeze_capture(tmp_path / "f.pcap", [data])
    v = replay_freeze(tmp_path / "f.pcap")
    assert (v.verdict, v.detector, v.detections, v.would) == ("pass", None, 0, [])
    armed = v.to_json()["armed"]
    assert armed == {"action": "freeze", "detector": "tls", "packet": 4, "after_s": 0.003,
                     "threshold_bytes": 16384, "server_bytes": total}


def test_the_server_packet_that_crosses_the_threshold_is_the_first_frozen(tmp_path):
    """One byte past 16,384: the segment that carries the count over is dropped, and
    every later one from the server; the client's packets pass."""
    first = 16384 - SYNACK - 40  # exactly at the threshold after this segment
    freeze_capture(tmp_path / "f.pcap", [first, 1, 500, 500])
    v = replay_freeze(tmp_path / "f.pcap")
    assert (v.verdict, v.detector, v.detections, v.packet) == ("freeze", "tls", 1, 7)
    assert v.would == [{"action": "drop", "direction": "to-client", "by": "freeze",
                        "after_bytes": 16384, "from_packet": 7, "packets": 3}]
    assert v.to_json()["armed"] is None
    assert v.evidence["by"] == "any_tls"


def test_unlisted_servers_and_non_tls13_flows_are_not_armed(tmp_path):
    freeze_capture(tmp_path / "o.pcap", [1400] * 20)
    v = replay_freeze(tmp_path / "o.pcap", servers=["198.18.9.0/24"])
    assert (v.verdict, v.to_json()["armed"]) == ("pass", None)
    tls12 = crafted_client_hello("a.lab").replace(b"\x00\x2b\x00\x03\x02\x03\x04",
                                                  b"\x00\x2b\x00\x03\x02\x03\x03")
    freeze_capture(tmp_path / "t.pcap", [1400] * 20, hello=tls12)
    assert replay_freeze(tmp_path / "t.pcap").to_json()["armed"] is None


def dtls_engine(name: str) -> Engine:
    return Engine(load_profile(name), clock=Clock(), rng=random.Random(0))


def app_data(n: int = 1) -> bytes:
    return b"".join(dv.record(dtls.CT_APPLICATION_DATA, b"\x17" * 48, epoch=1, seq=i)
                    for i in range(n))


def dtls13_client_hello() -> bytes:
    """pion's hello offering DTLS 1.3 (supported_versions = fe fc): a "dd3" JA4."""
    exts = [dv.ext(dtls.EXT_SIGNATURE_ALGORITHMS, dv.vec16(dv.PION_SIGALGS)),
            dv.groups(dtls.PION_CURVES), dv.ext(43, b"\x02\xfe\xfc")]
    body = dv.client_hello_body(dv.PION_CIPHERS, exts)
    return dv.record(dtls.CT_HANDSHAKE, dv.handshake(dtls.HT_CLIENT_HELLO, body))


@pytest.mark.parametrize(("name", "records"), [("tspu-dtls-ja4-2026", 2),
                                               ("tspu-snowflake-stall-2024", 1)])
def test_pions_hello_stalls_the_flow_after_data_reaches_the_client(name, records):
    eng = dtls_engine(name)
    assert dtls.ja4(dv.pion_client_hello()) == "dd2i060600_b94582744588_4bbccbffe950"
    # ClientHello from the proxy side, the rest of the handshake: no verdict yet.
    assert eng.handle(udp(SERVER, CLIENT, 5000, 6000, dv.pion_client_hello()), False).flow is None
    assert eng.handle(udp(CLIENT, SERVER, 6000, 5000, dv.pion_server_hello()), True).flow is None
    assert eng.handle(udp(CLIENT, SERVER, 6000, 5000, app_data(3)), True).flow is None  # ours
    for _ in range(records):  # data that reaches the client
        assert eng.handle(udp(SERVER, CLIENT, 5000, 6000, app_data()), False).flow is None
    v = eng.handle(udp(SERVER, CLIENT, 5000, 6000, app_data()), False)
    assert v.flow == "freeze"
    det = [e for e in eng.effects.events if e["event"] == "detection"][0]
    assert det["evidence"]["app_records"] == records and det["evidence"]["rule"] == "ja4"


@pytest.mark.parametrize("hello", [dv.chrome_like_client_hello, dv.firefox_like_client_hello,
                                   dtls13_client_hello])
def test_browser_and_dtls13_hellos_pass_the_2026_rule(hello):
    eng = dtls_engine("tspu-dtls-ja4-2026")
    eng.handle(udp(SERVER, CLIENT, 5000, 6000, hello()), False)
    for _ in range(5):
        assert eng.handle(udp(SERVER, CLIENT, 5000, 6000, app_data()), False).flow != "freeze"
    assert not [e for e in eng.effects.events if e["event"] == "detection"]
    assert dtls.ja4(dtls13_client_hello()).startswith("dd3")
