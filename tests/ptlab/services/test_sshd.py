"""sshd helpers: the generated config passes ``sshd -t``, and the client argv is right."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from ptlab.services.sshd import check_config, prepare_sshd, ssh_client_argv

pytestmark = pytest.mark.lab  # sshd's host keys and privilege separation: root
needs_sshd = pytest.mark.skipif(
    not (os.path.exists("/usr/sbin/sshd") and shutil.which("ssh-keygen")),
    reason="needs /usr/sbin/sshd and ssh-keygen (scripts/setup installs openssh-server)",
)


@needs_sshd
def test_prepare_sshd(tmp_path) -> None:
    files = prepare_sshd(tmp_path / "ssh", address=["127.0.0.1", "::1"], port=2222)
    assert files.argv == ("/usr/sbin/sshd", "-D", "-e", "-f", str(files.config))
    conf = files.config.read_text()
    assert "ListenAddress 127.0.0.1:2222" in conf and "ListenAddress [::1]:2222" in conf
    assert "UsePAM no" in conf and "PermitRootLogin prohibit-password" in conf
    assert f"PidFile {files.pid_file}" in conf and "StrictModes no" in conf
    assert f"AuthorizedKeysFile {files.authorized_keys}" in conf
    assert files.authorized_keys.read_text() == files.client_pub.read_text()
    assert stat.S_IMODE(files.client_key.stat().st_mode) == 0o600
    assert os.path.isdir("/run/sshd")
    check_config(files)
    # Preparing again keeps the keys.
    key = files.client_key.read_bytes()
    assert prepare_sshd(files.directory, port=2222).client_key.read_bytes() == key


def test_ssh_client_argv(tmp_path) -> None:
    from ptlab.services.sshd import SshdFiles

    files = SshdFiles(tmp_path, tmp_path / "c", tmp_path / "h", tmp_path / "k",
                      tmp_path / "k.pub", tmp_path / "a", tmp_path / "p", 22, ())
    argv = ssh_client_argv(files, "198.18.7.2", 2222, "true")
    assert argv[0] == "ssh" and argv[-2:] == ["root@198.18.7.2", "true"]
    for opt in ("BatchMode=yes", "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"):
        assert opt in argv
    assert argv[argv.index("-i") + 1] == str(tmp_path / "k")
    assert argv[argv.index("-p") + 1] == "2222"
