"""Iran's 2022–2026 profiles on the real datapath: the allowlist, the sticky SNI resets,
and UDP by ISP."""

from __future__ import annotations

import socket

import pytest

from censor_sim.detectors import tls
from netns.nsenter import ns_socket
from tests.support.tlsrecords import client_hello

pytestmark = pytest.mark.lab


def test_iran_2026_source_allowlist_and_sni_resets(censor_lab, run_censor, echo, tcp):
    """net4people/bbs#630: a source-IP allowlist (Observation 1) and, for an allowlisted
    source the SNI filter applies to, a reset on every blocklisted name, each time
    (Observations 5-7)."""
    web, bridge = censor_lab.addr("web"), censor_lab.addr("bridge")
    client = censor_lab.addr("client")
    echo([7470], role="web")
    echo([7470], role="bridge")
    # A seed whose draw makes the lab's client one of the filtered half of sources.
    seed = next(s for s in range(100) if tls.sticky_draw(client, "", s) < 0.5)
    lists = {"addresses": [], "domestic": [web]}
    censor = run_censor("iran-2026", {"detectors": {"ip_allowlist": lists}})
    assert tcp(web, 7470, [client_hello("example.lab")]) == "ok"  # domestic
    assert tcp(bridge, 7470, [b"hello"], timeout=0.8) == "connect-timeout"  # not listed
    final = censor.stop()
    assert final["counters"]["allowlist_drop"]["packets"] >= 1
    listed = {"addresses": [client], "domestic": [web]}
    censor = run_censor("iran-2026", {"detectors": {"ip_allowlist": listed,
                                                    "tls": {"sticky_seed": seed}}})
    assert tcp(bridge, 7470, [b"hello"]) == "ok"  # an allowlisted source reaches out
    for _ in range(3):  # the same source, the same answer
        for name in ("n1.blocked.lab", "n2.blocked.lab"):
            assert tcp(bridge, 7470, [client_hello(name)]) == "reset"
        assert tcp(bridge, 7470, [client_hello("random-unknown.lab")]) == "ok"
    final = censor.stop()
    assert final["counters"]["allowlist_drop"]["packets"] == 0
    assert final["injected"] == 6


def udp_delivery(lab, server: str, port: int, n: int, window: int = 10) -> float:
    """Share of `n` datagrams the echo server answered, sent `window` at a time so
    no socket buffer overflows (only the censor loses them)."""
    s = ns_socket(lab.ns("client"), socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.05)
    answered: set[int] = set()
    try:
        s.bind(("0.0.0.0", 0))
        for start in range(0, n, window):
            for i in range(start, min(start + window, n)):
                s.sendto(i.to_bytes(4, "big") + bytes(60), (server, port))
            try:
                while True:
                    data, _ = s.recvfrom(2048)
                    answered.add(int.from_bytes(data[:4], "big"))
            except TimeoutError:
                pass
        return len(answered) / n
    finally:
        s.close()


@pytest.mark.parametrize(("isp", "low", "high"), [("irancell", 0.0, 0.0), ("mci", 0.99, 1.0),
                                                  ("lossy", 0.12, 0.40)])
def test_iran_udp_by_isp(censor_lab, run_censor, echo, isp, low, high):
    srv = censor_lab.addr("bridge")
    echo([3478], proto="udp")
    run_censor("iran-udp-2022", {"detectors": {"udp": {"isp": isp}}})
    share = udp_delivery(censor_lab, srv, 3478, 400)
    # "lossy": 50 % each way, so about a quarter of round trips complete.
    print(f"{isp}: {share:.2%} of 400 datagrams answered")
    assert low <= share <= high, share
