"""Crash-safe removal of labs, working from names alone.

Everything a lab makes is named ``ptl<id>-*`` (namespaces, /etc/netns
entries) or ``ptl<id>*`` (interfaces), so a lab can be removed even when the
process that made it was SIGKILLed halfway: kill every process inside its
namespaces, delete the namespaces and their /etc/netns entries, remove any
stray interface in the root namespace, then the state directory.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from . import ownership
from .names import PREFIX, lab_id_of_ns
from .sh import run

ETC_NETNS = Path("/etc/netns")


def lab_namespaces(lab_id: str) -> list[str]:
    out = run(["ip", "netns", "list"], check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if lab_id_of_ns(n) == lab_id]


def all_lab_ids() -> set[str]:
    """Every lab id that has a namespace, a state directory or an /etc/netns entry."""
    ids: set[str] = set()
    out = run(["ip", "netns", "list"], check=False).stdout
    for line in out.splitlines():
        if line.strip() and (i := lab_id_of_ns(line.split()[0])):
            ids.add(i)
    if ownership.STATE_ROOT.is_dir():
        ids.update(p.name for p in ownership.STATE_ROOT.iterdir()
                   if p.is_dir() and not p.name.startswith("."))
    if ETC_NETNS.is_dir():
        ids.update(i for p in ETC_NETNS.iterdir() if (i := lab_id_of_ns(p.name)))
    return ids


@dataclass
class LabStatus:
    id: str
    namespaces: int
    owner_pid: int | None
    state: str  # "owned", "detached" or "orphan"


def status(lab_id: str) -> LabStatus:
    owner = ownership.read_owner(lab_id)
    if owner is None:
        # A claim puts the directory in place with its owner (ownership.claim): one
        # without is no lab being made, but debris.
        state = "orphan"
    elif owner.detached:
        state = "detached"
    else:
        state = "owned" if owner.alive() else "orphan"
    return LabStatus(lab_id, len(lab_namespaces(lab_id)), owner.pid if owner else None, state)


def _pids_in(ns: str) -> list[int]:
    out = run(["ip", "netns", "pids", ns], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit() and int(p) != os.getpid()]


def _kill_all(namespaces: list[str], grace: float = 2.0) -> None:
    pids = {p for ns in namespaces for p in _pids_in(ns)}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 2.0)
        while time.monotonic() < deadline:
            pids = {p for ns in namespaces for p in _pids_in(ns)}
            if not pids:
                return
            time.sleep(0.05)


def root_interfaces(lab_id: str) -> list[str]:
    out = run(["ip", "-o", "link", "show"], check=False).stdout
    names = [m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", out, re.M)]
    return [n for n in names if n.startswith(f"{PREFIX}{lab_id}")]


def down(lab_id: str) -> None:
    """Remove lab `lab_id` completely. Safe to call on a half-made or absent lab."""
    namespaces = lab_namespaces(lab_id)
    _kill_all(namespaces)
    for ns in namespaces:
        run(["ip", "netns", "del", ns], check=False)
    for name in root_interfaces(lab_id):
        run(["ip", "link", "del", name], check=False)
    if ETC_NETNS.is_dir():
        for p in ETC_NETNS.iterdir():
            if lab_id_of_ns(p.name) == lab_id:
                shutil.rmtree(p, ignore_errors=True)
    shutil.rmtree(ownership.state_dir(lab_id), ignore_errors=True)


def down_orphans() -> list[str]:
    """Remove every lab whose owner is dead; return their ids."""
    ownership.sweep_claims()
    removed = []
    for lab_id in sorted(all_lab_ids()):
        if status(lab_id).state == "orphan":
            down(lab_id)
            removed.append(lab_id)
    return removed


def down_all() -> list[str]:
    ownership.sweep_claims()
    ids = sorted(all_lab_ids())
    for lab_id in ids:
        down(lab_id)
    return ids
