"""The fetch loop Shadow's client hosts run: a real PT client (ptparent + our
``direct`` PT) and the lab's web server on loopback, no namespaces."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from ptlab.workloads import fetchloop


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def web():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ptlab.services.web", "--name", "web.lab",
                             "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True)
    try:
        assert "ready" in proc.stdout.readline()
        yield port
    finally:
        proc.terminate()
        proc.wait(5)


def test_fetches_through_a_pt_and_checks_every_byte(web, tmp_path, capsys):
    info = tmp_path / "pt.json"
    pt = subprocess.Popen([sys.executable, "-m", "ptlab.processes.ptparent", "client",
                           "--transport", "direct", "--state", str(tmp_path / "st"),
                           "--info", str(info), "--",
                           sys.executable, "-m", "transports.pt"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        rc = fetchloop.main(["--info", str(info), "--target", f"127.0.0.1:{web}",
                             "--size", "300000", "--every", "0.1", "--count", "2",
                             "--wait", "20"])
    finally:
        pt.terminate()
        pt.wait(5)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert rc == 0 and len(lines) == 2
    assert all(x["ok"] and x["bytes"] == 300000 for x in lines)


def test_a_missing_pt_is_reported(tmp_path, capsys):
    t0 = time.monotonic()
    rc = fetchloop.main(["--info", str(tmp_path / "none.json"), "--target", "127.0.0.1:9",
                         "--wait", "0.6"])
    assert rc == 1 and time.monotonic() - t0 < 5
    assert "no " in json.loads(capsys.readouterr().out)["error"]
