"""Helpers for tests that bring real labs up."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from netns import ownership, procstat

REPO = Path(__file__).resolve().parents[2]


def ptlab(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ptlab", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=timeout)


def spawn_ptlab(*args: str, stderr: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ptlab", *args], stdout=subprocess.DEVNULL,
                            stderr=stderr, stdin=subprocess.DEVNULL, cwd=REPO, text=True)


def lab_traces(lab_id: str) -> list[str]:
    """Everything of lab `lab_id` still on this machine (empty = fully removed)."""
    left = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += [f"netns {n.split()[0]}" for n in ns.splitlines()
             if n.startswith(f"ptl{lab_id}-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    left += [f"root interface {m}" for m in re.findall(r"^\d+: ([^:@]+)", links, re.M)
             if m.startswith(f"ptl{lab_id}")]
    etc = Path("/etc/netns")
    if etc.is_dir():
        left += [f"/etc/netns/{p.name}" for p in etc.iterdir()
                 if p.name.startswith(f"ptl{lab_id}-")]
    if ownership.state_dir(lab_id).exists():
        left.append(f"state dir {ownership.state_dir(lab_id)}")
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    left += [f"root nft {t}" for t in tables.splitlines() if "ptl" in t]
    return left


def pids_alive(pids: set[int]) -> set[int]:
    return {p for p in pids if procstat.alive(p)}


def lab_pids(lab_id: str) -> set[int]:
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    pids: set[int] = set()
    for line in ns.splitlines():
        name = line.split()[0]
        if name.startswith(f"ptl{lab_id}-"):
            out = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                                 text=True).stdout
            pids |= {int(p) for p in out.split()}
    pids.discard(os.getpid())
    return pids
