"""gfw-quic-sni-2024 live: Table 3 vectors and the source-port rule through the real censor."""

from __future__ import annotations

import pytest

from tests.support.quic_vectors import TABLE3, build_initial

pytestmark = pytest.mark.lab


def test_quic_sni_blocker_blocks_exactly_the_table3_vectors(censor_lab, run_censor, echo, udp):
    srv = censor_lab.addr("bridge")
    echo([5000, 4433], proto="udp")
    censor = run_censor("gfw-quic-sni-2024")
    sport = 50000
    seen = {}
    for variant in sorted(TABLE3):
        sport += 1
        udp(srv, 4433, build_initial("blocked.lab", variant), timeout=0.5, sport=sport)
        # The first datagram decides; the flow's later datagrams show the verdict.
        seen[variant] = not udp(srv, 4433, b"after", timeout=0.5, sport=sport)
    assert seen == TABLE3
    # Source port below the destination port: never blocked.
    assert udp(srv, 5000, build_initial("blocked.lab"), timeout=0.5, sport=4000)
    assert udp(srv, 5000, b"after", timeout=0.5, sport=4000)
    # A benign SNI passes.
    assert udp(srv, 4433, build_initial("www.allowed.lab"), timeout=0.5, sport=60001)
    blocked_events = censor.events("detection")
    assert len(blocked_events) == sum(TABLE3.values())
    assert all(e["detector"] == "quic_sni" for e in blocked_events)
