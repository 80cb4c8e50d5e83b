"""The ssh side of the three machines: commands, quoting, and vagrant's status."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ptlab.vm.hosts import SOCKET_PATH_MAX, SshHost, close_masters, control_dir
from ptlab.vm.vagrant import parse_status


def test_a_command_runs_as_root_in_the_checkout_with_its_environment(tmp_path):
    h = SshHost("servers", tmp_path / "cfg", control_dir=tmp_path / "ssh")
    cmd = h.command(["python", "-m", "x", "--set", '{"a": "b c"}'], env={"K": "v w"})
    assert cmd.startswith("sudo -n sh -c ")
    script = shlex.split(cmd)[-1]
    assert script.startswith("cd /ptlab && env PYTHONUNBUFFERED=1 'K=v w' python -m x")
    assert shlex.split(script.split("&& ", 1)[1])[-1] == '{"a": "b c"}'
    argv = h.ssh_argv(cmd)
    assert argv[:3] == ["ssh", "-F", str(tmp_path / "cfg")] and argv[-2:] == ["servers", cmd]
    assert f"ControlPath={tmp_path / 'ssh'}/%C" in argv


def test_a_background_command_prints_its_pid_and_logs(tmp_path):
    """Run the remote shell script here (sh, not ssh): it starts the process in a
    session of its own, logs to the file and prints the PID."""
    h = SshHost("client", tmp_path / "cfg", cwd=str(tmp_path), sudo=False)
    log = tmp_path / "d" / "p.log"
    cmd = h.command(["sh", "-c", "echo hello; echo $MARK"], env={"MARK": "m1"},
                    background_log=log)
    out = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=10).stdout
    assert out.strip().isdigit()
    for _ in range(100):
        if log.exists() and "m1" in log.read_text():
            break
        subprocess.run(["sleep", "0.05"])
    assert log.read_text().split() == ["hello", "m1"]


def test_vagrant_status_is_parsed():
    text = ("1700000000,client,metadata,provider,libvirt\n"
            "1700000000,client,state,running\n"
            "1700000000,censor,state,running\n"
            "1700000000,servers,state,shutoff\n"
            "1700000000,,ui,info,Current machine states:\n")
    assert parse_status(text) == {"client": "running", "censor": "running",
                                  "servers": "shutoff"}
    assert parse_status("") == {}


def test_vm_down_and_up_need_vagrant_and_say_so(tmp_path, monkeypatch):
    import pytest

    from netns.errors import LabError
    from ptlab.vm import vagrant

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LabError, match="vagrant is not installed"):
        vagrant.vagrant(["status"], Path(tmp_path))


def test_a_vagrant_error_exit_is_one_readable_line():
    from ptlab.vm.vagrant import error_exit

    text = ("1795469466,,error-exit,Vagrant::Errors::NoDefaultProvider,No usable default "
            "provider could be found for your system.\\n\\nVagrant relies on interactions "
            "with 3rd party systems%!(VAGRANT_COMMA) known as\\n'providers'\n")
    assert error_exit(text) == ["No usable default provider could be found for your system."]
    assert error_exit("1,client,state,running\n") == []


def test_control_sockets_fit_a_unix_socket_path_however_deep_the_run_dir(tmp_path):
    """ssh binds "<ControlPath>.<16 random>" before renaming it to %C (40 hex
    digits): under a pytest temporary directory that overflowed sun_path and ssh
    refused ("too long for Unix domain socket"). A short run dir is used as is;
    a deep one gets a short directory of the lab's, one per run dir, removed when
    the connections close."""
    short = Path(tempfile.mkdtemp(prefix="ptl-t-", dir="/tmp")) / "ssh"
    try:
        assert control_dir(short) == short and short.is_dir()
    finally:
        shutil.rmtree(short.parent)
    deep = tmp_path / ("d" * 60) / "state" / "ssh"
    a, b = control_dir(deep), control_dir(tmp_path / "other" / ("d" * 60) / "ssh")
    try:
        assert a != b and a.name.startswith("ptl-ssh-") and a.stat().st_mode & 0o777 == 0o700
        for d in (a, b):
            assert len(f"{d}/{'0' * 40}.{'x' * 16}") <= SOCKET_PATH_MAX
        assert control_dir(deep) == a   # the same run dir, the same directory
        close_masters({"client": SshHost("client", tmp_path / "cfg", control_dir=a)})
        assert not a.exists()
    finally:
        for d in (a, b):
            if d.exists():
                d.rmdir()
