"""The kernel fast path on the real datapath (``datapath.fast_path = "ebpf"``).

A tc program on the censor's client-side interface judges each new flow's
first payload (censor_sim/bpf/fet.bpf.c); only flows no rule exempts reach the
Python engine, whose policy acts as the tap's does: the trigger passes, and a
residual set entry or a conntrack mark blocks what follows.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from censor_sim.detectors import fet as fet_rules
from netns.nsenter import ns_socket

pytestmark = pytest.mark.lab

NOISE = bytes.fromhex("8f3a91c4d2e7b05a6c19f3e8a47d20b6") * 4  # not exempt by any rule
HTTP = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def kernel_fet(action: str, probability: float = 1.0) -> dict:
    return {"policy": {"rules": [{"detector": "fet", "action": action,
                                  "probability": probability}]},
            "actions": {"residual": {"seconds": [3.0]}},
            "datapath": {"mode": "on-path", "fast_path": "ebpf"}}


def wait_for(censor, name: str, n: int = 1) -> None:
    deadline = time.monotonic() + 3
    while len(censor.events(name)) < n and time.monotonic() < deadline:
        time.sleep(0.05)


def tc_state(lab) -> str:
    iface = lab.iface("censor", "client")
    out = subprocess.run(["ip", "netns", "exec", lab.ns("censor"), "tc", "filter", "show",
                          "dev", iface, "ingress"], capture_output=True, text=True)
    qdisc = subprocess.run(["ip", "netns", "exec", lab.ns("censor"), "tc", "qdisc", "show",
                            "dev", iface], capture_output=True, text=True)
    return out.stdout + qdisc.stdout


def test_the_kernel_judges_and_the_residual_blocks_what_follows(
        censor_lab, run_censor, echo, tcp):
    srv, port = censor_lab.addr("bridge"), 7160
    server = echo([port, port + 1])
    censor = run_censor("gfw-fet-2021", kernel_fet("residual"))
    assert "fet_classify" in tc_state(censor_lab)
    assert tcp(srv, port, [HTTP]) == "ok"  # exempt in the kernel: Python never hears of it
    assert tcp(srv, port, [NOISE]) == "ok"  # the trigger passes, as on any tap
    assert (port, NOISE) in server.received
    wait_for(censor, "action")
    assert tcp(srv, port, [HTTP], timeout=0.8) == "connect-timeout"  # the 3-tuple is blocked
    assert tcp(srv, port + 1, [HTTP]) == "ok"  # another port is not
    final = censor.stop()
    assert final["mechanism"] == "ebpf"
    assert final["counters"]["residual_drop"]["packets"] >= 1
    [det] = [d for d in censor.events("detection") if d["flow"]["server_port"] == port]
    # The kernel's measurements, logged as the Python detector logs them.
    assert det["detector"] == "fet" and det["actions"] == ["residual"]
    assert det["evidence"] == fet_rules.not_exempt_evidence(NOISE)
    assert det["data_packet"] == 1 and det["flow"]["client"] == censor_lab.addr("client")
    kernel = final["kernel"]
    assert kernel["flows"] >= 3 and kernel["judged"] == 3  # the blocked SYN sent no payload
    assert kernel[fet_rules.exemption(HTTP)] == 2
    assert kernel["not_exempt"] == 1 and kernel["lost"] == 0
    assert final["queued"] == 1  # one report: the exempt flows cost the process nothing
    # Nothing is left on the interface: the program and the qdisc it made are gone.
    assert "fet_classify" not in tc_state(censor_lab) and "clsact" not in tc_state(censor_lab)


def test_a_flow_drop_reaches_the_kernel_as_a_conntrack_mark(censor_lab, run_censor, echo):
    srv = censor_lab.addr("bridge")
    server = echo([7162])
    censor = run_censor("gfw-fet-2021", kernel_fet("drop"))
    s = ns_socket(censor_lab.ns("client"))
    s.settimeout(2)
    try:
        s.connect((srv, 7162))
        s.sendall(NOISE)
        wait_for(censor, "action")
        time.sleep(0.1)
        assert (7162, NOISE) in server.received
        s.sendall(HTTP)  # the same connection, now marked: dropped
        time.sleep(0.8)
        assert (7162, HTTP) not in server.received
    finally:
        s.close()
    final = censor.stop()
    assert final["marks_written"] == 1


def test_p_zero_detects_every_flow_and_blocks_none(censor_lab, run_censor, echo, tcp):
    srv, port, flows = censor_lab.addr("bridge"), 7163, 8
    echo([port])
    censor = run_censor("gfw-fet-2021", kernel_fet("residual", probability=0.0))
    for _ in range(flows):
        assert tcp(srv, port, [NOISE]) == "ok"
    wait_for(censor, "detection", flows)
    final = censor.stop()
    detections = [d for d in censor.events("detection") if d["flow"]["server_port"] == port]
    assert len(detections) == flows and all(d["actions"] == [] for d in detections)
    assert final["queued"] == flows == final["kernel"]["not_exempt"]


def test_the_fast_path_refuses_what_it_cannot_run(censor_lab, tmp_path):
    """In-path, or beside a detector with no kernel program: a clear error, exit 2,
    and nothing installed."""
    both = tmp_path / "fet-and-sni.toml"
    both.write_text('name = "fet-and-sni"\ndescription = "x"\nsource = "x"\n'
                    '[detectors.fet]\n[detectors.tls]\nkind = "tls"\nsni = ["blocked.lab"]\n'
                    '[policy]\nrules = [{ detector = "fet", action = "residual" }]\n'
                    '[datapath]\nmode = "on-path"\nfast_path = "ebpf"\n')
    for profile, overrides, why in (
            ("gfw-fet-2021", {"datapath": {"mode": "in-path", "fast_path": "ebpf"}}, "on-path"),
            ("gfw-fet-2021", {"datapath": {"mode": "on-path", "fast_path": "xdp"}},
             "must be 'ebpf'"),
            (str(both), {}, "detectors.tls (tls) has no kernel program")):
        cfg = tmp_path / "bad.json"
        cfg.write_text(json.dumps({"profile": profile, "overrides": overrides,
                                   "inside": censor_lab.iface("censor", "client"),
                                   "outside": censor_lab.iface("censor", "inet")}))
        done = subprocess.run(["ip", "netns", "exec", censor_lab.ns("censor"), sys.executable,
                               "-m", "censor_sim", "--config", str(cfg)],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, done.stderr
        assert "datapath.fast_path" in done.stderr and why in done.stderr
        assert "fet_classify" not in tc_state(censor_lab)



def test_batched_reports_come_at_a_batch_or_on_the_timer(censor_lab, run_censor, echo, tcp):
    """With tap_batch and tap_wait_ms, the reader is woken per batch, and what waits
    short of one is drained by its timer: every flow is still reported, once, in a
    few drains rather than one per flow."""
    srv, port, flows = censor_lab.addr("bridge"), 7164, 10
    echo([port])
    over = kernel_fet("residual", probability=0.0)
    over["datapath"].update(tap_batch=4, tap_wait_ms=1000)
    censor = run_censor("gfw-fet-2021", over)
    for _ in range(flows):  # two batches of 4, and 2 for the timer
        assert tcp(srv, port, [NOISE]) == "ok"
    wait_for(censor, "detection", flows)
    final = censor.stop()
    assert len([d for d in censor.events("detection")
                if d["flow"]["server_port"] == port]) == flows
    assert final["queued"] == flows
    # 3 drains (two batches of 4, then the timer for 2), or 4 if a tick of the 1 s
    # timer fell among the flows; fewer when a starved reader woke late and found
    # more than a batch waiting (a loaded 2-CPU machine). Without batching: one
    # drain per flow, 10.
    assert 1 <= final["report_batches"] <= 4


def test_a_killed_censors_program_is_replaced_not_doubled(censor_lab, run_censor, echo, tcp):
    """SIGKILL leaves the program on the interface (it goes with the lab's
    namespace); the next censor takes its slot rather than running beside it."""
    import os
    import signal

    srv, port = censor_lab.addr("bridge"), 7166
    echo([port])
    first = run_censor("gfw-fet-2021", kernel_fet("residual", probability=0.0))
    os.killpg(first.proc.pid, signal.SIGKILL)
    first.proc.stop(timeout=5)
    assert tc_state(censor_lab).count(" handle ") == 1  # left behind
    second = run_censor("gfw-fet-2021", kernel_fet("residual", probability=0.0))
    assert tc_state(censor_lab).count(" handle ") == 1  # replaced, not doubled
    assert tcp(srv, port, [NOISE]) == "ok"
    wait_for(second, "detection")
    final = second.stop()
    assert final["queued"] == 1 and final["kernel"]["judged"] == 1
    assert "fet_classify" not in tc_state(censor_lab)
    # The datapath table went too, as after any censor's exit.
    nft = subprocess.run(["ip", "netns", "exec", censor_lab.ns("censor"), "nft", "list",
                          "tables"], capture_output=True, text=True)
    assert "ptlcensor" not in nft.stdout
