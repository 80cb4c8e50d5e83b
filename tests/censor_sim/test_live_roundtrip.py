"""Live verdict = offline verdict: the censor's client-side capture of a live run, replayed
through ``censor_sim.offline`` (``ptlab censor --pcap``), gives the same verdict on the same
packet, for the SNI blocklist and the GFW's QUIC SNI blocker (docs/lab/censor.md §4)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from censor_sim.offline import replay
from censor_sim.profile import load_profile
from netns.capture import Capture
from tests.support.quic_vectors import build_initial
from tests.support.tlsrecords import client_hello

pytestmark = pytest.mark.lab


def capture(lab, path: Path, bpf: str) -> Capture:
    return Capture(lab.ns("censor"), lab.iface("censor", "client"), path, snaplen=2048,
                   bpf=bpf).start()


def test_sni_blocklist_round_trips(censor_lab, run_censor, echo, tcp, tmp_path):
    srv = censor_lab.addr("bridge")
    echo([7480])
    overrides = {"actions": {"residual": {"seconds": [30]}}}
    censor = run_censor("sni-blocklist", overrides)
    cap = capture(censor_lab, tmp_path / "sni.pcap", "tcp port 7480")
    try:
        assert tcp(srv, 7480, [client_hello("example.lab")]) == "ok"
        assert tcp(srv, 7480, [client_hello("www.blocked.lab")]) == "reset"
        assert tcp(srv, 7480, [b"again"], timeout=0.8) == "connect-timeout"
    finally:
        time.sleep(0.2)
        cap.stop()
    live = censor.events("detection")
    assert [d["evidence"]["matched"] for d in live] == ["blocked.lab"]
    flows = list(replay(load_profile("sni-blocklist", overrides), tmp_path / "sni.pcap"))
    assert [v.verdict for v in flows] == ["pass", "rst+residual", "dropped-by-residual"]
    blocked = flows[1]
    assert (blocked.detector, blocked.data_packet) == ("tls", live[0]["data_packet"])
    assert blocked.flow["client_port"] == live[0]["flow"]["client_port"]
    assert blocked.evidence["matched"] == "blocked.lab"
    # Three RST+ACKs each way, and the block on the triple, from the client's side.
    injected = [w for w in blocked.would if w["action"] == "inject"]
    assert sorted((w["direction"], w["flags"], w["count"]) for w in injected) == [
        ("to-client", "RA", 3), ("to-server", "RA", 3)]
    assert [w["direction"] for w in blocked.would if w["action"] == "residual"] == [
        "to-server"]
    assert flows[2].cause["flow"] == blocked.id  # the next flow names what caught it


def test_quic_sni_round_trips(censor_lab, run_censor, echo, udp, tmp_path):
    srv = censor_lab.addr("bridge")
    echo([4480], proto="udp")
    censor = run_censor("gfw-quic-sni-2024")
    cap = capture(censor_lab, tmp_path / "quic.pcap", "udp port 4480")
    try:
        assert udp(srv, 4480, build_initial("www.allowed.lab"), timeout=0.5, sport=53000)
        assert udp(srv, 4480, build_initial("blocked.lab"), timeout=0.5, sport=53001)
        assert not udp(srv, 4480, b"after", timeout=0.3, sport=53002)
    finally:
        time.sleep(0.2)
        cap.stop()
    live = censor.events("detection")
    assert [d["flow"]["client_port"] for d in live] == [53001]
    flows = {v.flow["client_port"]: v for v in replay(load_profile("gfw-quic-sni-2024"),
                                                       tmp_path / "quic.pcap")}
    assert flows[53000].verdict == "pass"
    assert (flows[53001].verdict, flows[53001].detector, flows[53001].packet) == (
        "residual", "quic_sni", 1)
    assert flows[53002].verdict == "dropped-by-residual"
