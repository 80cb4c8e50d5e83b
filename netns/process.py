"""Long-running processes inside a lab namespace.

Each process is started with ``ip netns exec`` (which execs, so the PID we
hold is the program's own), in its own session so a stop reaches its
children, with stdout and stderr captured to a log file and a stdin pipe kept
open (PT children exit when stdin closes if TOR_PT_EXIT_ON_STDIN_CLOSE=1).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from . import procstat
from .errors import LabError
from .sh import which


def wait_for_log(name: str, log_text: Callable[[], str], running: Callable[[], bool],
                 predicate: Callable[[str], bool], timeout: float, what: str,
                 interval: float = 0.02, status: Callable[[], object] = lambda: "?",
                 hint: str = "") -> None:
    """Poll a process's log until predicate(text) holds. LabError, with the log's
    last lines, if the process dies first, or, with `hint` (what would change the
    wait), if `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate(log_text()):
            return
        if not running():
            tail = " | ".join(log_text().strip().splitlines()[-3:])
            raise LabError(f"{name} exited (status {status()}) before {what}: {tail}")
        time.sleep(interval)
    raise LabError(f"{name} not {what} after {timeout:.0f}s" + (f"; {hint}" if hint else ""))


class LabProcess:
    """A process in namespace `ns`, logging to `log_path`."""

    def __init__(self, ns: str, argv: list[str], name: str, log_path: Path,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.ns, self.argv, self.name, self.log_path = ns, list(argv), name, Path(log_path)
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self._log_offset = 0  # where this run's output starts in a reused log

    def start(self) -> LabProcess:
        ip = which("ip") or "ip"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - lives with the process
        env = dict(os.environ)
        env.update(self.env or {})
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            self.proc = subprocess.Popen(
                [ip, "netns", "exec", self.ns, *self.argv],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                env=env, cwd=self.cwd, start_new_session=True,
            )
        except OSError as exc:
            raise LabError(f"could not start {self.name}: {exc}") from exc
        finally:
            log.close()
        self.started = time.time()
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self, this_run_only: bool = False) -> str:
        try:
            with open(self.log_path, "rb") as f:
                if this_run_only:
                    f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def wait_for(self, predicate: Callable[[str], bool], timeout: float, what: str,
                 hint: str = "") -> None:
        """Wait until predicate(log text) holds; fail if the process dies or time runs out."""
        wait_for_log(self.name, lambda: self.log_text(this_run_only=True), self.running,
                     predicate, timeout, what,
                     status=lambda: self.proc.returncode if self.proc else "?", hint=hint)

    def wait_log(self, pattern: str, timeout: float = 10.0, what: str | None = None,
                 hint: str = "") -> None:
        """Wait for ``pattern`` in the log; ``what`` says what that means in the
        error (default: the pattern), ``hint`` what would change it."""
        rx = re.compile(pattern)
        self.wait_for(lambda text: bool(rx.search(text)), timeout,
                      what or f"ready (/{pattern}/)", hint)

    def stop(self, timeout: float = 3.0) -> int | None:
        """SIGTERM the process group, then SIGKILL it; return the leader's exit status.

        The group is signalled even when the leader has already exited: a shell
        that died under ``set -e`` leaves its background children (a VPN daemon
        holding a tun device) in the group, and they must not outlive the cell.
        """
        if self.proc is None:
            return None
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 2.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            if self._group_gone(wait):
                break
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        return self.proc.poll()

    def cpu_seconds(self) -> float | None:
        """CPU seconds the process and its group have used so far (None if not started)."""
        return group_cpu_seconds(self.proc.pid) if self.proc else None

    def _group_gone(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for every live member of the group to exit."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            self.proc.poll()  # reap the leader
            if not live_group_members(self.proc.pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def _group_stats(pgid: int) -> dict[int, list[str]]:
    """Each live (not zombie) member of process group ``pgid``: its stat fields
    (:func:`procstat.fields`)."""
    members = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = procstat.fields(int(entry.name))
        if fields is not None and int(fields[procstat.PGRP]) == pgid and procstat.running(fields):
            members[int(entry.name)] = fields
    return members


def live_group_members(pgid: int) -> list[int]:
    """The PIDs in process group ``pgid`` that are not zombies.

    Orphans are reaped by PID 1, which may take a second or more; a zombie holds
    no descriptor or device any more, so it does not count.
    """
    return sorted(_group_stats(pgid))


def _threads_runtime(pid: int) -> float | None:
    """Seconds on the CPU of the process's live threads, to the nanosecond
    (schedstat), or None where the kernel does not keep it."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds of the group's live members, with the children each has reaped
    (a launcher's tool, once it exits, counts in its parent).

    A member's own time is its threads' runtime in nanoseconds where the kernel
    keeps it (clock ticks of 10 ms would round a fast transfer away), otherwise
    its user and system ticks; reaped children are counted in ticks.
    """
    total = 0.0
    for pid, f in _group_stats(pgid).items():
        own = _threads_runtime(pid)
        total += own if own is not None else procstat.own_ticks(f) / procstat.TICK
        total += procstat.reaped_ticks(f) / procstat.TICK
    return total
