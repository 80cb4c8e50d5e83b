"""Who owns a lab (docs/architecture.md §5.2).

Each lab has a state directory with an owner record: the owner's PID and its
start time (so a recycled PID is not mistaken for a live owner). A lab whose
owner is dead is an orphan, and ``ptlab lab down`` removes only orphans. A lab
brought up by ``ptlab lab up`` is *detached*: it outlives its creator and is
removed only by name (``lab down ID``) or with ``--all``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

STATE_ROOT = Path(os.environ.get("PTLAB_STATE_DIR", "/run/ptlab"))


def state_dir(lab_id: str) -> Path:
    return STATE_ROOT / lab_id


def proc_start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` in clock ticks, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 22; the command name (field 2) may hold spaces, so split after ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


@dataclass
class Owner:
    pid: int
    start: int | None
    detached: bool = False
    created: float = 0.0

    def alive(self) -> bool:
        if self.detached:
            return True
        now = proc_start_time(self.pid)
        return now is not None and now == self.start


def write_owner(lab_id: str, pid: int | None = None, detached: bool = False) -> Owner:
    pid = os.getpid() if pid is None else pid
    owner = Owner(pid, proc_start_time(pid), detached, time.time())
    d = state_dir(lab_id)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / "owner.tmp"
    tmp.write_text(json.dumps(owner.__dict__))
    tmp.replace(d / "owner.json")
    return owner


def read_owner(lab_id: str) -> Owner | None:
    try:
        return Owner(**json.loads((state_dir(lab_id) / "owner.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def claim(lab_id: str) -> bool:
    """Atomically create the state directory; False if the id is taken."""
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    try:
        state_dir(lab_id).mkdir()
    except FileExistsError:
        return False
    return True


def claim_lab(lab_id: str | None) -> str:
    """Claim `lab_id`, or a fresh random id, and record this process as its owner.

    LabError if `lab_id` is taken (or, improbably, no free id turns up).
    """
    from .errors import LabError
    from .names import new_lab_id

    if lab_id is None:
        for _ in range(20):
            if claim(candidate := new_lab_id()):
                lab_id = candidate
                break
        else:
            raise LabError("could not find a free lab id")
    elif not claim(lab_id):
        raise LabError(f"lab {lab_id!r} exists already (ptlab lab down {lab_id} removes it)")
    write_owner(lab_id)
    return lab_id
