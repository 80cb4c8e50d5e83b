"""One-line errors for a bad spec, a missing privilege and a missing system tool."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def ptlab(*args, env=None):
    return subprocess.run([sys.executable, "-m", "ptlab", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=60)


def one_line_error(proc):
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert proc.stderr.startswith("ptlab: ")
    return lines[0]


def test_bad_spec_key_is_named(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text((REPO / "experiments/default.toml").read_text()
                    .replace("[workloads.bulk]\nsize", "[workloads.bulk]\nsise"))
    line = one_line_error(ptlab("run", str(spec)))
    assert "bad.toml: workloads.bulk.sise: unknown key" in line


def test_missing_privilege(monkeypatch, capsys):
    """As a non-root user (euid faked: the venv lives under /root), every lab command
    stops at once with one line, before touching anything."""
    from netns import cleanup
    from ptlab import cli

    monkeypatch.setattr(os, "geteuid", lambda: 1000)

    def must_not_run(*a, **k):
        raise AssertionError("the root check let a lab command through")

    # Should the root check ever regress, nothing real is torn down.
    for fn in ("down", "down_all", "down_orphans"):
        monkeypatch.setattr(cleanup, fn, must_not_run)
    for argv in (["lab", "up"], ["lab", "down", "--all"], ["run", "--quick"],
                 ["vm", "run", "--split", "experiments/vm.toml"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert err.startswith("ptlab: needs root"), err


@pytest.mark.lab
def test_missing_system_tool(tmp_path):
    # A PATH with python but without ip/nft: the lab must name the tool.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(sys.executable, bindir / "python3")
    env = {**os.environ, "PATH": str(bindir), "PTLAB_NO_SBIN": "1"}
    if os.geteuid() != 0:
        pytest.skip("the tool check comes after the root check")
    line = one_line_error(ptlab("lab", "up", env=env))
    assert "missing system tool 'ip' (Debian package iproute2)" in line


@pytest.mark.lab
def test_unknown_lab_for_down():
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root")
    line = one_line_error(ptlab("lab", "down", "zz99"))
    assert "no lab 'zz99'" in line


def test_report_on_missing_dir(tmp_path):
    line = one_line_error(ptlab("report", str(tmp_path)))
    assert "no results.json" in line


def test_vm_run_refuses_what_three_machines_cannot_hold():
    line = one_line_error(ptlab("vm", "run", "--split", "experiments/meek.toml"))
    assert "transports.meek: not available on the three-machine layout" in line


@pytest.mark.lab
def test_vm_run_without_vms_says_why_in_one_line(tmp_path):
    # qemu's state in a directory of this test's: VMs another run has up on this
    # machine (/var/lib/ptlab/vm-qemu) are not this test's to find.
    env = {**os.environ, "VAGRANT_HOME": str(tmp_path / "vh"), "VAGRANT_DEFAULT_PROVIDER": "none",
           "PTLAB_VM_STATE": str(tmp_path / "qemu-state")}
    out = tmp_path / "results" / "vm1"
    proc = ptlab("vm", "run", "experiments/vm.toml", "--results", str(out), env=env)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ptlab: ") and ("vagrant" in last or "VMs" in last), proc.stderr
    # No empty results directory is left to be taken for a run.
    assert not out.exists()
