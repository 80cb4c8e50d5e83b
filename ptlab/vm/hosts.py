"""Running commands on the three machines: in a namespace here, or over ssh.

A :class:`Host` runs short commands, starts long-running processes whose
output goes to a log file on that machine, and copies directories both ways.
Paths are the same on every machine (the run's work directory is one absolute
path everywhere), so an argv built here means the same thing there.

- :class:`NamespaceHost`: a network namespace on this machine. Files are
  shared, so copying is a no-op.
- :class:`SshHost`: a machine reached with ``ssh -F CONFIG NAME``, as
  ``vagrant ssh-config`` describes the VMs. Commands run under ``sudo -n``
  unless the login is root, over one shared connection (ControlMaster).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from netns.errors import LabError
from netns.process import LabProcess, wait_for_log
from netns.sh import run as run_local

from ..common.labview import Process


class Host(Protocol):
    name: str
    python: str  # the Python of ptlab's .venv on that machine

    def run(self, argv: list[str], check: bool = True,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]: ...
    def spawn(self, argv: list[str], name: str, log: Path,
              env: dict[str, str] | None = None) -> Process: ...
    def push(self, path: Path) -> None: ...
    def pull(self, path: Path) -> None: ...


class NamespaceHost:
    """A machine of the layout played by network namespace `ns` on this machine."""

    def __init__(self, name: str, ns: str, python: str) -> None:
        self.name, self.ns, self.python = name, ns, python

    def run(self, argv: list[str], check: bool = True,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return run_local(["ip", "netns", "exec", self.ns, *argv], check=check, timeout=timeout)

    def spawn(self, argv: list[str], name: str, log: Path,
              env: dict[str, str] | None = None) -> Process:
        return LabProcess(self.ns, argv, name, log, env=env).start()

    def push(self, path: Path) -> None:
        """Nothing to copy: the namespaces share this machine's files."""

    def pull(self, path: Path) -> None:
        """Nothing to copy: the namespaces share this machine's files."""


class SshHost:
    """A machine reached over ssh (a Vagrant VM, or anything in an ssh config)."""

    def __init__(self, name: str, ssh_config: Path, python: str = "/ptlab/.venv/bin/python",
                 cwd: str = "/ptlab", sudo: bool = True, control_dir: Path | None = None) -> None:
        self.name, self.ssh_config, self.python = name, Path(ssh_config), python
        self.cwd, self.sudo = cwd, sudo
        self.control_dir = control_dir

    def ssh_argv(self, command: str) -> list[str]:
        opts = ["-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]
        if self.control_dir is not None:
            opts += ["-o", "ControlMaster=auto", "-o", "ControlPersist=120",
                     "-o", f"ControlPath={self.control_dir}/%C"]
        return ["ssh", "-F", str(self.ssh_config), *opts, self.name, command]

    def command(self, argv: list[str], env: dict[str, str] | None = None,
                background_log: Path | None = None) -> str:
        """The remote shell command for `argv` (as root, in the checkout).

        With `background_log`, the process starts in a session of its own
        (so a stop reaches its children), writes to that log, and the shell
        prints its PID.
        """
        envs = [f"{k}={v}" for k, v in {"PYTHONUNBUFFERED": "1", **(env or {})}.items()]
        cmd = shlex.join(["env", *envs, *argv])
        if background_log is not None:
            log = shlex.quote(str(background_log))
            cmd = (f"mkdir -p {shlex.quote(str(background_log.parent))} && "
                   f"{{ setsid {cmd} > {log} 2>&1 < /dev/null & echo $!; }}")
        return self._as_root(f"cd {shlex.quote(self.cwd)} && {cmd}")

    def _as_root(self, script: str) -> str:
        """The remote command that runs shell `script` as root."""
        return ("sudo -n " if self.sudo else "") + "sh -c " + shlex.quote(script)

    def _ssh(self, command: str, input: bytes | None = None, timeout: float = 60.0,
             check: bool = True) -> subprocess.CompletedProcess[bytes]:
        try:
            proc = subprocess.run(self.ssh_argv(command), input=input, capture_output=True,
                                  timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LabError(f"ssh {self.name}: {exc}") from None
        if check and proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip().splitlines()
            raise LabError(f"on {self.name}: {command[:120]} exited {proc.returncode}: "
                           f"{err[-1] if err else 'no output'}")
        return proc

    def run(self, argv: list[str], check: bool = True,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        p = self._ssh(self.command(argv), timeout=timeout, check=check)
        return subprocess.CompletedProcess(argv, p.returncode,
                                           p.stdout.decode(errors="replace"),
                                           p.stderr.decode(errors="replace"))

    def spawn(self, argv: list[str], name: str, log: Path,
              env: dict[str, str] | None = None) -> Process:
        out = self._ssh(self.command(argv, env, background_log=log)).stdout.decode().split()
        if not out or not out[-1].isdigit():
            raise LabError(f"could not start {name} on {self.name}: no PID came back")
        return SshProcess(self, name, argv, int(out[-1]), log)

    def push(self, path: Path) -> None:
        """Copy our files in `path` (a directory) to the machine.

        A file the machine has already is never replaced: it may be a log that a
        process there is still writing, and replacing it would orphan the writer.
        """
        data = subprocess.run(["tar", "-C", str(path), "-cf", "-", "."], capture_output=True,
                              check=True).stdout
        q = shlex.quote(str(path))
        self._ssh(self._as_root(f"mkdir -p {q} && tar -C {q} --skip-old-files -xf -"),
                  input=data)

    def pull(self, path: Path) -> None:
        """Copy the machine's `path` (a directory) here; nothing if it has none.

        Where copies differ, the newer wins: the machine that wrote a log last
        holds the live one, and copies pushed elsewhere keep their older times.
        """
        q = shlex.quote(str(path))
        p = self._ssh(self._as_root(f"test -d {q} && tar -C {q} -cf - . || true"))
        if p.stdout:
            path.mkdir(parents=True, exist_ok=True)
            subprocess.run(["tar", "-C", str(path), "--keep-newer-files", "-xf", "-"],
                           input=p.stdout, check=True, capture_output=True)


#: What a Unix socket's path may hold (sun_path, 108 bytes with its NUL).
SOCKET_PATH_MAX = 107
#: ssh's ControlPath %C (40 hex digits), and the ".XXXXXXXXXXXXXXXX" suffix of
#: the temporary socket ssh binds before renaming it, with the separating slash.
_CONTROL_NAME_LEN = 1 + 40 + 17


def control_dir(preferred: Path) -> Path:
    """The directory for the hosts' ssh control sockets: `preferred` (the run's
    own) when the sockets' paths fit a Unix socket, else a short directory of the
    lab's under the temporary directory, named after `preferred` so two runs
    never share one. A pytest temporary path is long enough to overflow it:
    ssh then refuses with "too long for Unix domain socket"."""
    if len(str(preferred)) + _CONTROL_NAME_LEN <= SOCKET_PATH_MAX:
        path = preferred
    else:
        tag = hashlib.sha1(str(preferred).encode()).hexdigest()[:12]
        path = Path(tempfile.gettempdir()) / f"ptl-ssh-{tag}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def close_masters(hosts: dict[str, SshHost]) -> None:
    """Close the shared ssh connection (ControlMaster) of each host, and remove
    a short control directory made for them (:func:`control_dir`)."""
    dirs = set()
    for h in hosts.values():
        subprocess.run([*h.ssh_argv("true")[:-2], "-O", "exit", h.name],
                       capture_output=True, timeout=10)
        if h.control_dir is not None and h.control_dir.name.startswith("ptl-ssh-"):
            dirs.add(h.control_dir)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


class SshProcess:
    """A process started by :meth:`SshHost.spawn`, watched over ssh."""

    def __init__(self, host: SshHost, name: str, argv: list[str], pid: int, log: Path) -> None:
        self.host, self.name, self.argv, self.pid, self.log_path = host, name, argv, pid, log
        self._last_log = ""

    def running(self) -> bool:
        """Alive and not a zombie (a reaper may be slow, or absent in a container)."""
        p = self.host.run(["ps", "-o", "stat=", "-p", str(self.pid)], check=False)
        state = p.stdout.strip()
        return p.returncode == 0 and bool(state) and not state.startswith("Z")

    def log_text(self, this_run_only: bool = False) -> str:
        p = self.host.run(["cat", str(self.log_path)], check=False)
        if p.returncode == 0:
            self._last_log = p.stdout
        return self._last_log

    def wait_for(self, predicate: Callable[[str], bool], timeout: float, what: str,
                 hint: str = "") -> None:
        wait_for_log(f"{self.name} on {self.host.name}", self.log_text, self.running,
                     predicate, timeout, what, interval=0.2, hint=hint)

    def wait_log(self, pattern: str, timeout: float = 10.0, what: str | None = None,
                 hint: str = "") -> None:
        rx = re.compile(pattern)
        self.wait_for(lambda text: bool(rx.search(text)), timeout,
                      what or f"ready (/{pattern}/)", hint)

    def cpu_seconds(self) -> float | None:
        """Not measured on the machines: their CPU is emulated, and the figure would
        measure the emulator (ptlab vm compares status and detections, not cost)."""
        return None

    def stop(self, timeout: float = 3.0) -> int | None:
        """SIGTERM the process's session, then SIGKILL it. The exit status stays there."""
        group = f"-{self.pid}"
        self.host.run(["kill", "-TERM", "--", group], check=False)
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.running():
            self.host.run(["kill", "-KILL", "--", group], check=False)
        return None
