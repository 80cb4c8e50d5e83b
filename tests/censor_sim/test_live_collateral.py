"""Collateral damage of gfw-fet-2021 on the benign mix, against the rules themselves."""

from __future__ import annotations

import secrets
import ssl
import struct

import dns.message
import pytest

from censor_sim.detectors import fet
from ptlab.services.benign import binary_frame

pytestmark = pytest.mark.lab

ALWAYS = {"policy": {"rules": [{"detector": "fet", "action": "residual", "probability": 1.0}]},
          "actions": {"residual": {"seconds": [5]}}}


def first_payloads() -> dict[str, bytes]:
    """What each benign flow kind sends first, built the way the benign workload builds it."""
    ctx = ssl.create_default_context()
    out = ssl.MemoryBIO()
    obj = ctx.wrap_bio(ssl.MemoryBIO(), out, server_hostname="www.benign.lab")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    q = dns.message.make_query("web.lab", "A").to_wire()
    return {
        "https": out.read(),
        "http": b"GET / HTTP/1.1\r\nHost: web.lab\r\n\r\n",
        "dns-tcp": struct.pack("!H", len(q)) + q,
        "ssh": b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n",
        "binary": binary_frame(secrets.token_bytes(1024)),
    }


def test_benign_mix_is_blocked_exactly_where_the_rules_say(lab):
    row = lab.run_cell("direct", "gfw-fet-2021", ALWAYS, benign=True)
    assert row.status == "reachable", row.error  # direct's HTTP first packet is exempt
    detail = row.benign_detail
    expected = {kind: fet.exemption(p) is None for kind, p in first_payloads().items()}
    assert expected == {"https": False, "http": False, "dns-tcp": False, "ssh": False,
                        "binary": True}
    assert detail["binary"]["blocked"] >= 1  # the non-zero case
    for kind in ("https", "http", "ssh"):
        assert detail[kind]["blocked"] == 0, (kind, detail)
    tcp_dns = [k for k in detail if k.startswith("dns")]
    assert all(detail[k]["blocked"] == 0 for k in tcp_dns), detail
    # UDP is never touched by the FET rules.
    assert detail.get("udp", {"blocked": 0})["blocked"] == 0
    assert row.collateral == pytest.approx(row.benign_blocked / row.benign_total)
    assert 0 < row.collateral < 0.5
    # The detections hit the benign binary flow, not direct's own: the row says so
    # (the transport undetected, the binary class's flows detected).
    assert row.detector is None and row.detections == {}
    assert row.collateral_detections.get("binary", 0) >= detail["binary"]["blocked"]
    assert set(row.collateral_detections) == {"binary"}
