"""Live tests per profile: each censor model on the real datapath, against real sockets."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.lab

NOISE = bytes.fromhex("8f3a91c4d2e7b05a6c19f3e8a47d20b6") * 4


def test_gfw_keyword_resets_a_keyword_request(censor_lab, run_censor, echo, tcp):
    srv = censor_lab.addr("bridge")
    echo([7200, 7201])
    censor = run_censor("gfw-keyword", {"actions": {"residual": {"seconds": [2]}}})
    assert tcp(srv, 7200, [b"GET /news HTTP/1.1\r\nHost: a.lab\r\n\r\n"]) == "ok"
    assert tcp(srv, 7201, [b"GET /ultrasurf HTTP/1.1\r\nHost: a.lab\r\n\r\n"]) == "reset"
    # The penalty box: the same 3-tuple stays blocked for the residual time.
    assert tcp(srv, 7201, [b"GET / HTTP/1.1\r\nHost: a.lab\r\n\r\n"], timeout=0.8) != "ok"
    time.sleep(2.2)
    assert tcp(srv, 7201, [b"GET / HTTP/1.1\r\nHost: a.lab\r\n\r\n"]) == "ok"
    act = censor.events("action")[0]
    rsts = act["injected"]
    assert {r["dst"] for r in rsts} == {censor_lab.addr("client"), srv}
    assert all(r["flags"] == "RA" and r["count"] == 3 and r["window"] == 8192 for r in rsts)
    assert censor.stop()["injected"] == 6
    det = censor.events("detection")[0]
    assert det["evidence"]["keyword"] == "ultrasurf" and det["evidence"]["where"] == "path"


def test_ptlab_censor_blocks_in_a_namespace_router(censor_lab, echo, tcp, tmp_path):
    """`ptlab censor` on the router's real interfaces, started by hand, not by the runner."""
    srv = censor_lab.addr("bridge")
    echo([7210])
    over = {"policy": {"rules": [{"detector": "fet", "action": "residual", "probability": 1.0}]},
            "actions": {"residual": {"seconds": [30]}}}
    proc = subprocess.Popen(
        ["ip", "netns", "exec", censor_lab.ns("censor"), sys.executable, "-m", "ptlab",
         "censor", "--profile", "gfw-fet-2021", "--inside", censor_lab.iface("censor", "client"),
         "--outside", censor_lab.iface("censor", "inet"), "--set", json.dumps(over)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert '"event": "ready"' in line, (line, proc.stderr.read() if proc.poll() else "")
        assert tcp(srv, 7210, [b"GET / HTTP/1.1\r\n\r\n"]) == "ok"
        assert tcp(srv, 7210, [NOISE], timeout=0.8) == "timeout"
        assert tcp(srv, 7210, [b"GET / HTTP/1.1\r\n\r\n"], timeout=0.8) == "connect-timeout"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert '"event": "counters"' in out
    # It cleaned up after itself: the router forwards again.
    left = subprocess.run(["ip", "netns", "exec", censor_lab.ns("censor"), "nft", "list",
                           "tables"], capture_output=True, text=True).stdout
    assert "ptlcensor" not in left
    assert tcp(srv, 7210, [b"GET / HTTP/1.1\r\n\r\n"]) == "ok"


def test_ptlab_censor_rejects_bad_input(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ptlab", "censor", *args],
                              capture_output=True, text=True, timeout=30)

    r = run("--profile", "none", "--inside", "ptlnope0", "--outside", "lo")
    assert r.returncode == 2 and "no interface 'ptlnope0'" in r.stderr
    r = run("--profile", "none", "--inside", "lo", "--outside", "lo")
    assert r.returncode == 2 and "must be different" in r.stderr


def test_iran_filter_blocks_random_443_for_the_configured_time_and_resets(
        censor_lab, run_censor, echo, tcp):
    srv = censor_lab.addr("bridge")
    server = echo([443, 8443, 80])
    censor = run_censor("iran-protocol-filter-2020",
                        {"actions": {"residual": {"seconds": [2]}}})
    rand = [bytes.fromhex("9d41c7e2") * 16, bytes.fromhex("5ab3") * 20]
    assert tcp(srv, 8443, rand) == "ok"  # not a filtered port
    assert tcp(srv, 80, [b"GET / HTTP/1.1\r\n" + b"x" * 20]) == "ok"  # HTTP passes
    t0 = time.monotonic()
    # The first packet gets through (its echo comes back); what follows does not.
    assert tcp(srv, 443, rand, timeout=1.0) == "timeout"
    got = b"".join(d for p, d in server.received if p == 443)
    assert got.startswith(rand[0]) and rand[1] not in got
    time.sleep(max(1.2 - (time.monotonic() - t0), 0))
    assert tcp(srv, 443, [b"GET / HTTP/1.1\r\n\r\n"], timeout=0.6) == "connect-timeout"
    # 2.4 s after the block: the original 2 s are over, but the attempt at 1.2 s
    # restarted the timer, so the 3-tuple is still blocked (and restarts again).
    time.sleep(max(2.4 - (time.monotonic() - t0), 0))
    assert tcp(srv, 443, [b"GET / HTTP/1.1\r\n\r\n"], timeout=0.6) == "connect-timeout"
    time.sleep(max(4.4 + 0.4 - (time.monotonic() - t0), 0))
    assert tcp(srv, 443, [b"GET / HTTP/1.1\r\n\r\n"]) == "ok"
    assert len(censor.events("residual_refresh")) >= 2
