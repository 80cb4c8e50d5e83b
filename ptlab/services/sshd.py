"""Debian's OpenSSH server as a lab service, and the matching client command.

SSH is the classic collateral victim of censors that block fully encrypted
or unclassifiable traffic, so the benign mix runs a real sshd and a real ssh
client. Everything the pair needs (host key, client key pair, authorized keys,
config, pid file) lives in one directory of the caller's, so nothing touches
the machine's own /etc/ssh, and the config disables PAM, passwords and DNS
lookups so a login works inside a namespace with no outside world.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SSH = "ssh"
SSH_KEYGEN = "ssh-keygen"
PRIVSEP_DIR = Path("/run/sshd")
# sshd -e prints this to stderr once it listens.
READY_MARKER = "Server listening on"


@dataclass(frozen=True)
class SshdFiles:
    """The files of one lab sshd, and the argv that runs it in the foreground."""

    directory: Path
    config: Path
    host_key: Path
    client_key: Path
    client_pub: Path
    authorized_keys: Path
    pid_file: Path
    port: int
    argv: tuple[str, ...]


def _keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    try:
        subprocess.run(
            [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
            check=True, capture_output=True, text=True, timeout=30,
        )
    except FileNotFoundError:
        raise RuntimeError("ssh-keygen not found (Debian package openssh-client)") from None
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"ssh-keygen failed: {exc.stderr.strip()}") from None


def _listen_line(address: str, port: int) -> str:
    return f"ListenAddress [{address}]:{port}" if ":" in address else (
        f"ListenAddress {address}:{port}")


def prepare_sshd(directory: str | os.PathLike[str], address: str | Sequence[str] = "0.0.0.0",
                 port: int = 22) -> SshdFiles:
    """Create keys and an sshd_config in `directory`; return the files and sshd's argv.

    Existing keys are reused, so a directory can be prepared twice. sshd also
    needs its privilege-separation directory /run/sshd, which this creates.
    """
    d = Path(directory).resolve()
    d.mkdir(parents=True, exist_ok=True)
    host_key = d / "ssh_host_ed25519_key"
    client_key = d / "client_ed25519"
    _keygen(host_key, "ptlab-sshd-host")
    _keygen(client_key, "ptlab-ssh-client")
    client_pub = client_key.with_name(client_key.name + ".pub")
    authorized = d / "authorized_keys"
    authorized.write_text(client_pub.read_text())
    authorized.chmod(0o600)
    addresses = [address] if isinstance(address, str) else list(address)
    pid_file = d / "sshd.pid"
    config = d / "sshd_config"
    lines = [
        *[_listen_line(a, port) for a in addresses],
        f"HostKey {host_key}",
        f"PidFile {pid_file}",
        f"AuthorizedKeysFile {authorized}",
        "UsePAM no",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "StrictModes no",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        "X11Forwarding no",
        "AllowTcpForwarding no",
        "LogLevel INFO",
        "MaxStartups 100:30:200",
    ]
    config.write_text("\n".join(lines) + "\n")
    PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    argv = (SSHD, "-D", "-e", "-f", str(config))
    return SshdFiles(d, config, host_key, client_key, client_pub, authorized, pid_file, port,
                     argv)


def sshd_files_in(directory: Path, port: int = 22) -> SshdFiles:
    """The files of a directory :func:`prepare_sshd` made (elsewhere, perhaps on
    another machine); nothing is created or checked."""
    d = Path(directory)
    config = d / "sshd_config"
    return SshdFiles(d, config, d / "ssh_host_ed25519_key", d / "client_ed25519",
                     d / "client_ed25519.pub", d / "authorized_keys", d / "sshd.pid", port,
                     (SSHD, "-D", "-e", "-f", str(config)))


def check_config(files: SshdFiles) -> None:
    """Run ``sshd -t`` on the config; raise RuntimeError with sshd's complaint if bad."""
    proc = subprocess.run([SSHD, "-t", "-f", str(files.config)], capture_output=True,
                          text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"sshd -t: {proc.stderr.strip() or proc.stdout.strip()}")


def ssh_client_argv(files: SshdFiles, host: str, port: int, command: str,
                    connect_timeout: float = 3.0) -> list[str]:
    """The ssh command that logs in as root with the lab client key and runs `command`."""
    return [
        SSH, "-F", "/dev/null",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null",
        "-o", "LogLevel=ERROR",
        "-o", "IdentitiesOnly=yes",
        "-o", f"ConnectTimeout={max(1, round(connect_timeout))}",
        "-i", str(files.client_key),
        "-p", str(port),
        f"root@{host}",
        command,
    ]


def wait_ready(proc: subprocess.Popen, log: str | os.PathLike[str],
               timeout: float = 10.0) -> None:
    """Wait until sshd, whose stderr goes to file `log`, says it listens.

    A file rather than a pipe: sshd -e logs every login to stderr, and a pipe
    nobody drains would eventually stall it. RuntimeError if it exits or stays
    silent.
    """
    deadline = time.monotonic() + timeout
    path = Path(log)
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if READY_MARKER in text:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    text = path.read_text(errors="replace").strip() if path.exists() else ""
    tail = " | ".join(text.splitlines()[-3:]) or "no output"
    state = f"exited {proc.returncode}" if proc.poll() is not None else "not listening"
    raise RuntimeError(f"sshd {state}: {tail}")
