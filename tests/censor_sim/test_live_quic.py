"""gfw-quic-sni-2024 live: Table 3 vectors, the port rule, the 3-tuple block and the
60 s window (scaled down by its parameters) through the real censor."""

from __future__ import annotations

import time

import pytest

from tests.support.quic_vectors import TABLE3, build_initial

pytestmark = pytest.mark.lab


def test_quic_sni_blocker_blocks_exactly_the_table3_vectors(censor_lab, run_censor, echo, udp):
    srv = censor_lab.addr("bridge")
    # One server port per vector: a block covers the client's whole (server, port).
    ports = {v: 4440 + i for i, v in enumerate(sorted(TABLE3))}
    echo([5000, 4433, *ports.values()], proto="udp")
    censor = run_censor("gfw-quic-sni-2024")
    seen = {}
    for i, (variant, port) in enumerate(ports.items()):
        udp(srv, port, build_initial("blocked.lab", variant), timeout=0.5, sport=50001 + i)
        # The first datagram decides; the client's later datagrams show the verdict.
        seen[variant] = not udp(srv, port, b"after", timeout=0.5, sport=51001 + i)
    assert seen == TABLE3
    # Source port below the destination port: never blocked.
    assert udp(srv, 5000, build_initial("blocked.lab"), timeout=0.5, sport=4000)
    assert udp(srv, 5000, b"after", timeout=0.5, sport=4000)
    # A benign SNI passes.
    assert udp(srv, 4433, build_initial("www.allowed.lab"), timeout=0.5, sport=60001)
    blocked_events = censor.events("detection")
    assert len(blocked_events) == sum(TABLE3.values())
    assert all(e["detector"] == "quic_sni" for e in blocked_events)


def test_the_block_lifts_and_the_flow_window_expires(censor_lab, run_censor, echo, udp):
    """180 s and 60 s, scaled to 2 s and 1 s by the profile's own parameters."""
    srv = censor_lab.addr("bridge")
    echo([4460, 4461], proto="udp")
    key = "net.netfilter.nf_conntrack_udp_timeout_stream"
    before = censor_lab.exec("censor", ["sysctl", "-n", key]).stdout.strip()
    censor = run_censor("gfw-quic-sni-2024", {"actions": {"residual": {"seconds": [2]}},
                                     "datapath": {"flow_idle_s": 1,
                                                  "udp_conntrack_timeout_s": 1}})
    t0 = time.monotonic()
    # The trigger itself is answered (on-path); then any source port is blocked.
    assert udp(srv, 4460, build_initial("blocked.lab"), timeout=0.5, sport=52000)
    assert not udp(srv, 4460, b"other port", timeout=0.3, sport=52001)
    time.sleep(max(2.2 - (time.monotonic() - t0), 0))
    assert udp(srv, 4460, b"lifted", timeout=0.5, sport=52002)
    # Something else first, then the Initial inside the window: exempt.
    assert udp(srv, 4461, b"\x00" * 40, timeout=0.5, sport=52010)
    assert udp(srv, 4461, build_initial("blocked.lab"), timeout=0.5, sport=52010)
    assert udp(srv, 4461, b"still fine", timeout=0.5, sport=52010)
    # Silent past the window (engine and kernel both forget): inspected again.
    time.sleep(2.5)
    udp(srv, 4461, build_initial("blocked.lab"), timeout=0.5, sport=52010)
    assert not udp(srv, 4461, b"blocked now", timeout=0.3, sport=52010)
    assert censor_lab.exec("censor", ["sysctl", "-n", key]).stdout.strip() == "1"
    censor.stop()  # and the namespace's conntrack timeouts are the kernel's again
    assert censor_lab.exec("censor", ["sysctl", "-n", key]).stdout.strip() == before
