"""The CLI end to end: lab up/status/exec/down, run's exit status, and SIGTERM."""

from __future__ import annotations

import json
import secrets
import signal
import time
import xml.etree.ElementTree as ET

import pytest

from netns import cleanup

from .conftest import lab_traces, ptlab, spawn_ptlab

pytestmark = pytest.mark.lab


WRONG_SPEC = """
[experiment]
name = "wrong"
repetitions = 1
[transports.direct]
[censors.none]
[censors.ip-blocklist]
[workloads.benign]
enabled = false
[[expect]]
transport = "direct"
censor = "none"
status = "reachable"
[[expect]]
transport = "direct"
censor = "ip-blocklist"
status = "reachable"
"""


#: A row whose server never listens: its cells are ERROR, which is not the censor's.
BROKEN_SPEC = """
[experiment]
name = "broken"
repetitions = 1
[transports.never]
kind = "external"
binaries = ["sleep"]
server = "sleep 30"
client = "sleep 30"
ready_timeout_s = 2
[censors.none]
[workloads.benign]
enabled = false
"""


def test_lab_up_status_exec_down():
    lab_id = "c" + secrets.token_hex(2)[:3]
    try:
        up = ptlab("lab", "up", "--id", lab_id, "--proxies", "1")
        assert up.returncode == 0, up.stderr
        assert f"ptl{lab_id}-client" in up.stdout
        st = ptlab("lab", "status")
        assert f"{lab_id}: detached" in st.stdout
        ex = ptlab("lab", "exec", "--id", lab_id, "client", "--", "ping", "-c1", "-W1",
                   "web.lab")
        assert ex.returncode == 0 and "1 received" in ex.stdout, ex.stdout + ex.stderr
        bad = ptlab("lab", "exec", "--id", lab_id, "nosuchnode", "--", "true")
        assert bad.returncode == 2 and "no node 'nosuchnode'" in bad.stderr
        # A detached lab survives the orphan sweep, and goes by name.
        assert ptlab("lab", "down").returncode == 0
        assert cleanup.status(lab_id).namespaces > 0
        assert ptlab("lab", "down", lab_id).returncode == 0
        assert lab_traces(lab_id) == []
    finally:
        cleanup.down(lab_id)


def test_run_exits_1_when_an_expectation_fails(tmp_path):
    spec = tmp_path / "wrong.toml"
    spec.write_text(WRONG_SPEC)
    out = tmp_path / "res"
    proc = ptlab("run", str(spec), "--quick", "--results", str(out), timeout=180)
    assert proc.returncode == 1, proc.stderr
    assert ("expectation failed: direct × ip-blocklist: expected reachable, got blocked"
            in proc.stderr)
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["expectation_met"] for r in rows] == [True, False]
    assert (out / "report.html").stat().st_size > 10_000


def test_sigterm_on_run_takes_its_lab_down(tmp_path):
    lab_id = "s" + secrets.token_hex(2)[:3]
    proc = spawn_ptlab("run", "--quick", "--lab-id", lab_id, "--results", str(tmp_path))
    deadline = time.monotonic() + 30
    while cleanup.status(lab_id).namespaces == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(30) == 130
        assert lab_traces(lab_id) == []  # no `lab down` needed
    finally:
        cleanup.down(lab_id)


#: Two cells whose client waits up to a minute for a bridge the censor blocks: one
#: for each worker, both under way whenever Ctrl-C comes, however busy the machine.
TWO_LABS_SPEC = """
[experiment]
name = "ctrl-c"
[transports.obfs4]
[transports.obfs4proxy]
[censors.ip-blocklist]
detectors.ip_blocklist.addresses = ["role:bridge"]
[workloads]
bootstrap_timeout_s = 60
[workloads.benign]
enabled = false
"""


def test_ctrl_c_on_a_run_of_two_labs_is_one_line_and_leaves_no_lab(tmp_path):
    """Ctrl-C signals the terminal's whole process group: the run and its Dask
    workers. The run stops in one line (exit 130); the workers, which leave SIGINT
    to the run, print no traceback, and their labs go with them. Nothing else is
    on stderr (a second run at once once warned that Dask's port 8787 was taken)."""
    import os
    import subprocess
    import sys

    from netns import ownership

    from .conftest import REPO

    spec = tmp_path / "two.toml"
    spec.write_text(TWO_LABS_SPEC)
    out = tmp_path / "res"
    run = subprocess.Popen([sys.executable, "-m", "ptlab", "run", str(spec), "--quick",
                            "--jobs", "2", "--results", str(out)], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           start_new_session=True,  # a group of its own, as a terminal's
                           # A terminal's foreground command takes SIGINT: one started by
                           # a background job inherits it ignored (CI's harness may be).
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    labs: set[str] = set()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and run.poll() is None:
            workers = {int(p) for p in subprocess.run(
                ["pgrep", "-P", str(run.pid)], capture_output=True, text=True).stdout.split()}
            labs |= {lab_id for lab_id in cleanup.all_lab_ids()
                     if (owner := ownership.read_owner(lab_id)) and owner.pid in workers}
            if len(labs) == 2:  # both workers' labs up: the run is under way
                break
            time.sleep(0.3)
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    text = err.decode()
    assert len(labs) == 2, text[-2000:]  # both labs were up when Ctrl-C came
    assert run.returncode == 130, text[-2000:]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    assert text.splitlines() == ["ptlab: interrupted"], text[-2000:]
    assert {lab_id: lab_traces(lab_id) for lab_id in labs} == {lab_id: [] for lab_id in labs}


def test_run_exits_4_with_an_error_cell_and_says_so_in_junit(tmp_path):
    spec = tmp_path / "broken.toml"
    spec.write_text(BROKEN_SPEC)
    out, junit = tmp_path / "res", tmp_path / "cells.xml"
    proc = ptlab("run", str(spec), "--quick", "--results", str(out), "--junit", str(junit),
                 timeout=180)
    assert proc.returncode == 4, proc.stderr
    assert "ptlab: ERROR never × none: " in proc.stderr
    error = ET.parse(junit).getroot().find("testsuite/testcase/error")
    assert error is not None and error.get("type") == "lab"
    # The index beside the run links its report.
    assert 'href="res/report.html"' in (tmp_path / "index.html").read_text()
