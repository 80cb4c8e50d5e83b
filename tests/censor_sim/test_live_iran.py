"""Iran's 2022–2026 profiles on the real datapath: the allowlist, the sticky SNI resets,
and UDP by ISP."""

from __future__ import annotations

import socket

import pytest

from censor_sim.detectors import tls
from netns.nsenter import ns_socket
from tests.support.tlsrecords import client_hello

pytestmark = pytest.mark.lab


def test_iran_2026_allowlist_and_sni_resets(censor_lab, run_censor, echo, tcp):
    web, bridge = censor_lab.addr("web"), censor_lab.addr("bridge")
    client = censor_lab.addr("client")
    echo([7470], role="web")
    echo([7470], role="bridge")
    censor = run_censor("iran-2026", {"detectors": {"ip_allowlist": {"addresses": [web]}}})
    names = [f"n{i}.blocked.lab" for i in range(20)]
    filtered = next(n for n in names if tls.sticky_draw(client, n) < 0.5)
    spared = next(n for n in names if tls.sticky_draw(client, n) >= 0.5)
    assert tcp(web, 7470, [client_hello("example.lab")]) == "ok"
    assert tcp(bridge, 7470, [b"hello"], timeout=0.8) == "connect-timeout"  # not allowlisted
    for _ in range(3):  # the same pair, the same answer
        assert tcp(web, 7470, [client_hello(filtered)]) == "reset"
        assert tcp(web, 7470, [client_hello(spared)]) == "ok"
    final = censor.stop()
    assert final["counters"]["allowlist_drop"]["packets"] >= 1
    assert final["injected"] == 3


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
