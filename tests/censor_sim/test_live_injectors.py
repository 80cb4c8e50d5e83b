"""Measured RST injectors on the wire: each fingerprint as the client's side of the censor
captures it (S&P 2025 Table IV; GFW Report on 2025-08-20)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.tlsrecords import client_hello

pytestmark = pytest.mark.lab


@contextmanager
def client_side_capture(lab, path: Path) -> Iterator[Path]:
    from netns.capture import Capture

    cap = Capture(lab.ns("censor"), lab.iface("censor", "client"), path, snaplen=128,
                  bpf="tcp").start()
    try:
        yield path
    finally:
        time.sleep(0.2)
        cap.stop()


def rsts_to(pcap: Path, dst: str, ports: set[int]) -> list:
    """The RSTs toward ``dst`` on this test's server ports only: the lab is shared with
    earlier tests, whose late segments (the kernel's RSTs on their closed ports) the
    capture sees too."""
    from scapy.layers.inet import IP, TCP
    from scapy.utils import rdpcap

    return [p for p in rdpcap(str(pcap)) if TCP in p and p[TCP].flags.R and p[IP].dst == dst
            and ({p[TCP].sport, p[TCP].dport} & ports)]


def test_gfw_sni_rsts_carry_each_injectors_fingerprint(censor_lab, run_censor, echo, tcp,
                                                       tmp_path):
    from scapy.layers.inet import TCP

    srv, cli = censor_lab.addr("bridge"), censor_lab.addr("client")
    echo([7450])
    run_censor("gfw-sni-rst-2025", {"actions": {"residual": {"seconds": [3]}}})
    with client_side_capture(censor_lab, tmp_path / "gfw.pcap") as pcap:
        assert tcp(srv, 7450, [client_hello("example.lab")]) == "ok"
        assert tcp(srv, 7450, [client_hello("www.blocked.lab")]) == "reset"
        # The 3-tuple's residual block: any client port, until it lifts.
        assert tcp(srv, 7450, [client_hello("example.lab")], timeout=0.8) == "connect-timeout"
    forged = rsts_to(pcap, cli, {7450})
    by_type = {"I": [p for p in forged if str(p[TCP].flags) == "R" and p.id == 0],
               "II": [p for p in forged if str(p[TCP].flags) == "RA" and p.flags == "DF"],
               "III": [p for p in forged if p.ttl == 248]}
    assert len(by_type["I"]) == 1 and 55 <= by_type["I"][0].ttl <= 118
    assert by_type["I"][0].flags == 0
    two = by_type["II"]
    assert len(two) == 3 and len({bytes(p) for p in two}) == 1  # identical copies
    assert 39 <= two[0].ttl <= 238 and 0x00A3 <= two[0].id <= 0xFE5F
    assert len(by_type["III"]) == 1 and 0x9916 <= by_type["III"][0].id <= 0x9933
    assert str(by_type["III"][0][TCP].flags) == "RA" and by_type["III"][0].flags == 0
    time.sleep(3.2)
    assert tcp(srv, 7450, [client_hello("example.lab")]) == "ok"


@pytest.fixture
def no_tcp_timestamps(censor_lab):
    """Option-free data segments from the client, which Henan's parser wants (§4.3)."""
    key = "net.ipv4.tcp_timestamps"
    before = censor_lab.exec("client", ["sysctl", "-n", key]).stdout.strip()
    censor_lab.exec("client", ["sysctl", "-qw", f"{key}=0"])
    yield
    censor_lab.exec("client", ["sysctl", "-qw", f"{key}={before}"])


def test_henan_sends_one_rst_with_its_payload_to_the_client_alone(censor_lab, run_censor, echo,
                                                                  tcp, tmp_path,
                                                                  no_tcp_timestamps):
    from scapy.layers.inet import TCP

    srv, cli = censor_lab.addr("bridge"), censor_lab.addr("client")
    echo([7451, 7452])
    run_censor("henan-2025")
    with client_side_capture(censor_lab, tmp_path / "henan.pcap") as pcap:
        assert tcp(srv, 7451, [client_hello("blocked.lab")]) == "reset"
        # No residual: the same 3-tuple works at once.
        assert tcp(srv, 7451, [client_hello("example.lab")]) == "ok"
        assert tcp(srv, 7452, [b"GET / HTTP/1.1\r\nHost: blocked.lab\r\n\r\n"]) == "reset"
    forged = [p for p in rsts_to(pcap, cli, {7451, 7452}) if bytes(p[TCP].payload)]
    assert len(forged) == 2
    for p in forged:
        assert (p.ttl, p.id, int(p.flags), str(p[TCP].flags)) == (58, 1, 0, "RA")
        assert bytes(p[TCP].payload) == bytes.fromhex("01020304050607080900")
    # Nothing forged toward the server: every RST it got was the client's own.
    assert not [p for p in rsts_to(pcap, srv, {7451, 7452}) if p.ttl == 58 and p.id == 1]


def test_henan_misses_segments_with_tcp_options(censor_lab, run_censor, echo, tcp):
    echo([7453])
    censor = run_censor("henan-2025")
    # Linux's default timestamps give every data segment a 32-byte header.
    assert tcp(censor_lab.addr("bridge"), 7453, [client_hello("blocked.lab")]) == "ok"
    assert not censor.events("detection")


def test_the_2025_08_20_event_resets_443_and_leaves_8443_alone(censor_lab, run_censor, echo,
                                                               tcp, tmp_path):
    from scapy.layers.inet import TCP

    srv, cli = censor_lab.addr("bridge"), censor_lab.addr("client")
    echo([443, 8443, 80])
    censor = run_censor("gfw-443-rst-2025-08-20")
    with client_side_capture(censor_lab, tmp_path / "443.pcap") as pcap:
        assert tcp(srv, 443, [b"hello"]) == "refused"  # the RST+ACK on its SYN
        assert tcp(srv, 8443, [b"hello"]) == "ok"
        assert tcp(srv, 80, [b"hello"]) == "ok"
    forged = [p for p in rsts_to(pcap, cli, {443}) if p[TCP].sport == 443]
    assert sorted(p[TCP].window for p in forged) == [1980, 1981, 1982, 3293, 3294, 3295]
    assert all(str(p[TCP].flags) == "RA" for p in forged)
    on_syn = [p for p in forged if p[TCP].window < 2000]
    assert {p[TCP].seq for p in on_syn} == {0}
    assert [d["evidence"]["rule"] for d in censor.events("detection")] == ["syn", "syn+ack"]
