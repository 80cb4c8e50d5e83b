"""The kernel FET classifier (censor_sim/bpf/fet.bpf.c) against the Python detector.

Every payload here is run through the loaded program by BPF_PROG_TEST_RUN, as
the first payload of its own new flow (a SYN, then the data), and must get the
answer censor_sim.detectors.fet gives the same bytes: the same exemption rule,
or a report whose evidence equals ``not_exempt_evidence``. The boundary cases are
those of tests/censor_sim/detectors/test_fet.py (Wu et al. 2023, Algorithm 1);
hypothesis covers the rest.
"""

from __future__ import annotations

import itertools
import random
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw, raw

from censor_sim.bpf import libbpf
from censor_sim.bpf.fetclassifier import MAX_PAYLOAD, TC_ACT_OK, FetClassifier
from censor_sim.detectors import fet

CLIENT, SERVER = "198.18.0.2", "198.18.1.2"
CLIENT6, SERVER6 = "2001:db8::2", "2001:db8:1::2"
MAC_CLIENT, MAC_ROUTER = "02:00:00:00:00:01", "02:00:00:00:00:02"
NP3, NP4, NP5, P4 = b"\x07", b"\x0f", b"\x1f", b"U"  # as in test_fet.py
pytestmark = pytest.mark.lab  # loading an eBPF program needs root (CAP_BPF)

RULES = ("ex1", "ex2", "ex3", "ex4", "ex5")
_ports = itertools.count(20000)


@pytest.fixture(scope="module")
def classifier() -> Iterator[FetClassifier]:
    with FetClassifier(["198.18.0.0/15", "2001:db8::/32"]) as c:
        yield c


def frame(payload: bytes = b"", flags: str = "PA", sport: int = 40000, dport: int = 443,
          src: str = CLIENT, dst: str = SERVER, seq: int = 1000, ack: int = 2000) -> bytes:
    ip = IPv6(src=src, dst=dst) if ":" in src else IP(src=src, dst=dst)
    # Both MACs given: scapy would otherwise resolve the destination's, on the host.
    pkt = Ether(src=MAC_CLIENT, dst=MAC_ROUTER) / ip / TCP(sport=sport, dport=dport,
                                                           flags=flags, seq=seq, ack=ack)
    return raw(pkt / Raw(payload) if payload else pkt)


def kernel_judge(c: FetClassifier, payload: bytes, **addr: str) -> tuple[str | None, dict | None]:
    """The kernel's answer for ``payload`` as a new flow's first payload: the
    exempting rule (from the counters) or None and the report's evidence."""
    port = 1024 + next(_ports) % 60000
    before = c.counters()
    c.run_frame(frame(flags="S", sport=port, **addr))
    c.run_frame(frame(payload, sport=port, **addr))
    after = c.counters()
    moved = [r for r in RULES if after[r] != before[r]]
    reports = c.reports()
    assert after["judged"] == before["judged"] + 1
    if moved:
        assert moved and len(moved) == 1 and not reports
        return moved[0], None
    assert len(reports) == 1 and reports[0].client_port == port
    # The judged bytes come along, for a policy that probes with them.
    assert reports[0].payload == payload[:MAX_PAYLOAD]
    return None, reports[0].evidence()


def assert_same(c: FetClassifier, payload: bytes, **addr: str) -> str | None:
    rule, evidence = kernel_judge(c, payload, **addr)
    assert rule == fet.exemption(payload)
    assert evidence == fet.not_exempt_evidence(payload)
    return rule


# The boundaries of test_fet.py, each with the rule Python gives (and the paper implies).
BOUNDARIES = [
    (NP4 * 20 + NP3 * 30, "ex1"),          # 3.40 bits per byte exactly: exempt
    (NP4 * 21 + NP3 * 29, None),           # 3.42
    (NP4 * 21 + NP5 * 29, None),           # 4.58
    (NP4 * 20 + NP5 * 30, "ex1"),          # 4.60 exactly
    (P4 * 5 + NP4 * 60, None),             # five leading printable bytes
    (P4 * 6 + NP4 * 60, "ex2"),            # six
    ((NP4 + P4) * 50, None),               # 50 % printable
    ((NP4 + P4) * 49 + P4 * 2, "ex3"),     # 51 %
    (NP4 * 30 + P4 * 20 + NP4 * 30, None),  # a printable run of 20
    (NP4 * 30 + P4 * 21 + NP4 * 30, "ex4"),  # 21
    (b"\x16\x03\x09" + NP4 * 60, "ex5"),
    (b"\x16\x03\x0a" + NP4 * 60, None),
    (b"\x17\x03\x00" + NP4 * 60, "ex5"),
    (b"\x15\x03\x01" + NP4 * 60, None),
    (b"\x18\x03\x01" + NP4 * 60, None),
    (b"GET " + NP4 * 60, "ex5"), (b"PUT " + NP4 * 60, "ex5"),
    (b"POST " + NP4 * 60, "ex5"), (b"HEAD " + NP4 * 60, "ex5"),
    (b"GET" + NP4 * 60, None), (b"get " + NP4 * 60, None), (b"POST" + NP4 * 60, None),
    (b"GET " + P4 * 100, "ex2"),           # rules are reported in order
    (b"\x16\x03\x01" + P4 * 100, "ex3"),
    (b"\x16\x03", "ex1"), (b"\x00", "ex1"), (b"\x0f", None),
]


@pytest.mark.parametrize("payload, rule", BOUNDARIES)
def test_each_rule_at_and_across_its_threshold(classifier, payload, rule):
    assert fet.exemption(payload) == rule
    assert assert_same(classifier, payload) == rule


def test_popcount_thresholds_at_every_length_up_to_the_judged_maximum(classifier):
    """Ex1's integer comparison in C, at each length where 3.4·n and 4.6·n are
    whole numbers, on both sides (test_fet.py's sweep)."""
    for n in range(5, MAX_PAYLOAD + 1, 5):
        k = 2 * n // 5
        assert kernel_judge(classifier, NP4 * k + NP3 * (n - k))[0] == "ex1", n
        assert kernel_judge(classifier, NP4 * (k + 1) + NP3 * (n - k - 1))[0] is None, n
        k = 3 * n // 5
        assert kernel_judge(classifier, NP5 * k + NP4 * (n - k))[0] == "ex1", n
        assert kernel_judge(classifier, NP5 * (k - 1) + NP4 * (n - k + 1))[0] is None, n


_NEAR = st.builds(
    lambda prefix, body: prefix + bytes(body),
    st.sampled_from([b"", b"GET ", b"GET", b"POST ", b"\x16\x03\x09", b"\x16\x03\x0a",
                     b"\x17\x03\x00", P4 * 5, P4 * 6]),
    st.lists(st.sampled_from([0x07, 0x0F, 0x1F, 0x3F, 0x01, 0xE8, 0x55, 0x4B, 0x20, 0x7E,
                              0x7F, 0xFF, 0x00]), min_size=1, max_size=400))


@settings(max_examples=400, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(min_size=1, max_size=MAX_PAYLOAD), _NEAR))
@example(b"\x7e" * 20 + b"\x7f" + b"\x20" * 21)
@example(bytes(range(256)) * 5)
def test_fuzz_the_kernel_agrees_with_the_python_detector(classifier, payload):
    assert_same(classifier, payload)


def test_ipv6_flows_are_judged_alike(classifier):
    for payload in (NP4 * 21 + NP3 * 29, P4 * 6 + NP4 * 60, bytes(range(1, 200))):
        assert_same(classifier, payload, src=CLIENT6, dst=SERVER6)


def test_a_gso_payload_is_judged_on_its_first_segment(classifier):
    """Over MAX_PAYLOAD bytes (a GSO packet on a veth), the kernel judges the first
    MAX_PAYLOAD, as a 1500-byte-MTU wire would carry them, and says so."""
    payload = NP4 * 21 + NP3 * 29 + P4 * (MAX_PAYLOAD - 50) + NP4 * 100
    assert fet.exemption(payload) == "ex3"  # Python sees the whole, mostly printable
    truncated = classifier.counters()["truncated"]
    rule, evidence = kernel_judge(classifier, payload)
    assert (rule, evidence) == (fet.exemption(payload[:MAX_PAYLOAD]), None) == ("ex3", None)
    assert classifier.counters()["truncated"] == truncated + 1
    head = NP4 * (MAX_PAYLOAD // 2) + NP3 * (MAX_PAYLOAD // 2)
    rule, evidence = kernel_judge(classifier, head + P4 * 600)
    assert rule is None and evidence == fet.not_exempt_evidence(head)
    port = 1024 + next(_ports) % 60000  # the report names the wire length too
    classifier.run_frame(frame(flags="S", sport=port))
    classifier.run_frame(frame(head + P4 * 600, sport=port))
    (report,) = classifier.reports()
    assert (report.length, report.wire_length) == (MAX_PAYLOAD, MAX_PAYLOAD + 600)


def test_only_the_first_client_payload_of_a_seen_connection_is_judged(classifier):
    random_bytes = NP4 * 21 + NP3 * 29
    assert fet.exemption(random_bytes) is None
    before = classifier.counters()
    classifier.run_frame(frame(random_bytes, sport=30001))               # no SYN seen
    classifier.run_frame(frame(flags="S", sport=30002))
    classifier.run_frame(frame(random_bytes, sport=443, dport=30002,     # server to client
                               src=SERVER, dst=CLIENT))
    classifier.run_frame(frame(flags="SA", sport=443, dport=30002, src=SERVER, dst=CLIENT))
    classifier.run_frame(frame(flags="A", sport=30002))                  # no payload
    classifier.run_frame(frame(random_bytes, sport=30002))               # judged
    classifier.run_frame(frame(random_bytes, sport=30002))               # second: not
    after = classifier.counters()
    assert after["packets"] - before["packets"] == 7
    assert after["flows"] - before["flows"] == 1
    assert after["judged"] - before["judged"] == 1
    (report,) = classifier.reports()
    assert (report.client, report.client_port, report.server, report.server_port) == (
        CLIENT, 30002, SERVER, 443)
    assert (report.seq, report.ack, report.tcp_flags) == (1000, 2000, 0x18)  # PSH|ACK


def test_only_targeted_servers_and_ports_open_flows():
    with FetClassifier(["198.18.1.0/24"], ports=[443]) as c:
        for dst, dport in ((SERVER, 443), (SERVER, 8443), ("198.18.2.2", 443),
                           (SERVER6, 443)):
            c.run_frame(frame(flags="S", sport=31000, dport=dport, dst=dst,
                              src=CLIENT6 if ":" in dst else CLIENT))
        assert c.counters()["flows"] == 1
    with pytest.raises(ValueError, match="not a TCP port"):
        FetClassifier(ports=[0])


@settings(max_examples=300, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
@example(frame(b"x")[:40])                     # cut inside the TCP header
@example(frame(b"x" * 10)[:-5])                # IP length beyond the frame
def test_malformed_frames_pass_untouched(classifier, data):
    """Whatever arrives, the program passes it (TC_ACT_OK) and reports nothing
    it did not judge."""
    if len(data) < 14:
        data = data.ljust(14, b"\x00")  # BPF_PROG_TEST_RUN wants an Ethernet header
    before = classifier.counters()
    assert classifier.run_frame(data) == TC_ACT_OK
    after = classifier.counters()
    assert after["packets"] == before["packets"] + 1
    assert len(classifier.reports()) <= after["judged"] - before["judged"] <= 1


def test_run_time_stats_count_each_run_while_enabled(classifier, tmp_path):
    """The program's own CPU, for the benchmark's kernel row: runs and nanoseconds,
    read at the offset the installed <linux/bpf.h> gives (checked here with cc)."""
    src = tmp_path / "off.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <linux/bpf.h>\n"
                   "int main(void) { printf(\"%zu\", offsetof(struct bpf_prog_info, "
                   "run_time_ns)); return 0; }\n")
    subprocess.run(["cc", str(src), "-o", str(tmp_path / "off")], check=True)
    offset = subprocess.run([str(tmp_path / "off")], capture_output=True, text=True, check=True)
    assert int(offset.stdout) == libbpf._PROG_INFO_RUN_STATS
    classifier.measure_run_time()
    ns0, runs0 = classifier.run_time()
    for _ in range(3):
        classifier.run_frame(frame(flags="A", sport=30500))
    ns1, runs1 = classifier.run_time()
    assert runs1 - runs0 == 3 and ns1 > ns0


def test_reports_survive_the_ring_buffers_wrap(classifier):
    """More reports than the 4 MiB ring holds, read 500 at a time: each comes back
    whole and in order across the end of the ring, where a record wraps (the data
    area is mapped twice in a row, censor_sim/bpf/ringbuf.py)."""
    from censor_sim.bpf.fetclassifier import EVENTS_BYTES

    flows = EVENTS_BYTES // MAX_PAYLOAD + 600  # each record is longer than MAX_PAYLOAD
    rng = random.Random(9)
    got, sent = [], []
    for i in range(flows):
        payload = NP4 * 21 + NP3 * 29 + rng.randbytes(rng.randrange(0, 40))
        sport = 1024 + i
        classifier.run_frame(frame(flags="S", sport=sport, dport=8443))
        classifier.run_frame(frame(payload, sport=sport, dport=8443))
        sent.append((sport, payload))
        if i % 500 == 499:
            got += classifier.reports()
    got += classifier.reports()
    assert [(r.client_port, r.payload) for r in got] == [
        (s, p) for s, p in sent if fet.exemption(p) is None]
    assert classifier.counters()["lost"] == 0


def test_a_record_that_fails_to_decode_is_taken_off_and_the_rest_read(classifier):
    """A decoder that raises on a record loses that drain's records up to it, and no
    more: the next drain starts after it, instead of failing on it for ever."""
    from censor_sim.bpf.fetclassifier import FetReport

    classifier.reports()  # an empty ring to start from
    payload = NP4 * 21 + NP3 * 29
    for sport in (2001, 2002, 2003):
        classifier.run_frame(frame(flags="S", sport=sport, dport=8444))
        classifier.run_frame(frame(payload, sport=sport, dport=8444))
    seen: list[int] = []

    def decode(memory, offset: int, size: int) -> FetReport:
        report = FetReport.decode_from(memory, offset, size)
        seen.append(report.client_port)
        if report.client_port == 2002:
            raise ValueError("a record this reader cannot take")
        return report

    with pytest.raises(ValueError):
        classifier._events.drain_with(decode)
    assert seen == [2001, 2002]
    assert [r.client_port for r in classifier.reports()] == [2003]
    assert classifier.reports() == []


def test_a_reports_packet_is_the_judged_segment(classifier):
    """FetReport.packet: what the policy's actions read of the reported packet."""
    payload = NP4 * 21 + NP3 * 29
    classifier.run_frame(frame(flags="S", sport=2100, dport=8445, seq=77))
    classifier.run_frame(frame(payload, sport=2100, dport=8445, seq=78, ack=9000))
    (report,) = classifier.reports()
    pkt = report.packet()
    assert (pkt.version, pkt.src, pkt.dst, pkt.sport, pkt.dport) == (4, CLIENT, SERVER, 2100, 8445)
    assert (pkt.proto, pkt.seq, pkt.ack, pkt.flags, pkt.payload) == (6, 78, 9000, 0x18, payload)
    assert pkt.flow_tuple() == (CLIENT, SERVER, 6, 2100, 8445)


def test_the_python_side_reads_the_programs_own_sizes():
    """fetclassifier's constants and the report's layout are the C source's."""
    import re
    from pathlib import Path

    from censor_sim.bpf import fetclassifier

    src = (Path(fetclassifier.__file__).with_name("fet.bpf.c")).read_text()
    assert f"#define FET_MAX_PAYLOAD {MAX_PAYLOAD}\n" in src
    ring = re.search(r"max_entries, 1 << (\d+)\); /\* about", src)
    assert ring and 1 << int(ring.group(1)) == fetclassifier.EVENTS_BYTES
    slots = re.search(r"enum \{(.*?)C_SLOTS", src, re.S).group(1)
    names = re.findall(r"C_([A-Z0-9_]+)", slots)
    assert [n.lower() for n in names] == list(fetclassifier.COUNTERS)
