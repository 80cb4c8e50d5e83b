"""Russia's TSPU rules of 2022–2025 on the real datapath: what the client sees."""

from __future__ import annotations

import pytest

from tests.support.quic_vectors import build_initial, long_header
from tests.support.tlsrecords import crafted_client_hello

pytestmark = pytest.mark.lab


def test_tspu_quic_2022_drops_large_v1_datagrams_to_443(censor_lab, run_censor, echo, udp):
    srv = censor_lab.addr("bridge")
    echo([443, 8443], proto="udp")
    censor = run_censor("tspu-quic-2022")
    assert udp(srv, 443, long_header(1000), timeout=0.5, sport=50100)
    assert not udp(srv, 443, long_header(1001), timeout=0.5, sport=50101)
    assert not udp(srv, 443, b"later", timeout=0.3, sport=50101)  # the flow stays dropped
    assert udp(srv, 8443, long_header(1200), timeout=0.5, sport=50102)
    assert [d["evidence"]["size"] for d in censor.events("detection")] == [1001]


def test_tspu_ech_2024_drops_silently_over_tcp_and_quic(censor_lab, run_censor, echo, tcp, udp):
    srv = censor_lab.addr("bridge")
    echo([7460])
    echo([4470], proto="udp")
    run_censor("tspu-ech-2024")
    assert tcp(srv, 7460, [crafted_client_hello("cloudflare-ech.com")]) == "ok"
    # Silent: no RST, the client just waits.
    assert tcp(srv, 7460, [crafted_client_hello("cloudflare-ech.com", ech=True)],
               timeout=0.8) == "timeout"
    assert udp(srv, 4470, build_initial("cloudflare-ech.com"), timeout=0.5, sport=50200)
    assert not udp(srv, 4470, build_initial("x.lab", "ech-outer"), timeout=0.5, sport=50201)


def test_tspu_freeze_stalls_tls13_after_about_16kb_with_no_rst(censor_lab, run_censor):
    from tests.support.bulk import bulk_server, read_after

    srv = censor_lab.addr("bridge")
    server = bulk_server(censor_lab, 7465, 200_000)
    try:
        censor = run_censor("tspu-freeze-2025", {"detectors": {"tls": {"servers": [srv]}}})
        got, how = read_after(censor_lab, srv, 7465, crafted_client_hello("a.lab"), 200_000)
        print(f"frozen after {got} payload bytes")
        # The server's IP bytes past 16,384 vanish: its payload stops short of that.
        assert how == "stalled" and 8_000 <= got <= 16_384, (got, how)
        # Not TLS: the same server sends everything.
        assert read_after(censor_lab, srv, 7465, b"GET / HTTP/1.1\r\n\r\n", 200_000) == \
            (200_000, "complete")
        final = censor.stop()
        assert final["counters"]["freeze_drop"]["packets"] > 0
        assert final["injected"] == 0  # no RST
    finally:
        server.close()
