"""Who owns a lab (docs/architecture.md §5.2).

Each lab has a state directory with an owner record: the owner's PID and its
start time (so a recycled PID is not mistaken for a live owner). A lab whose
owner is dead is an orphan, and ``ptlab lab down`` removes only orphans. A lab
brought up by ``ptlab lab up`` is *detached*: it outlives its creator and is
removed only by name (``lab down ID``) or with ``--all``.

A state directory appears with its owner record already in it, or not at all
(:func:`claim`): a claimant killed at any instant leaves either nothing, a lab
whose owner is dead, or a hidden half-made claim that :func:`sweep_claims`
removes. So a directory without an owner is never a lab still being made.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import procstat

STATE_ROOT = Path(os.environ.get("PTLAB_STATE_DIR", "/run/ptlab"))
#: A claim being made: STATE_ROOT/.claim-<lab id>.<pid>.<thread id>, renamed into
#: place whole.
CLAIMING = ".claim-"


def state_dir(lab_id: str) -> Path:
    return STATE_ROOT / lab_id


@dataclass
class Owner:
    pid: int
    start: int | None
    detached: bool = False
    created: float = 0.0

    def alive(self) -> bool:
        if self.detached:
            return True
        now = procstat.start_time(self.pid)
        return now is not None and now == self.start


def _owner_record(pid: int, detached: bool) -> Owner:
    return Owner(pid, procstat.start_time(pid), detached, time.time())


def _write_record(d: Path, owner: Owner) -> None:
    tmp = d / "owner.tmp"
    tmp.write_text(json.dumps(owner.__dict__))
    tmp.replace(d / "owner.json")


def write_owner(lab_id: str, pid: int | None = None, detached: bool = False) -> Owner:
    """Replace the owner record of a claimed lab (atomically)."""
    owner = _owner_record(os.getpid() if pid is None else pid, detached)
    d = state_dir(lab_id)
    d.mkdir(parents=True, exist_ok=True)
    _write_record(d, owner)
    return owner


def read_owner(lab_id: str) -> Owner | None:
    try:
        return Owner(**json.loads((state_dir(lab_id) / "owner.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def claim(lab_id: str) -> bool:
    """Atomically create the state directory, this process's owner record in it;
    False if the id is taken. The record is written in a hidden directory first,
    which a rename then puts in place whole."""
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    target = state_dir(lab_id)
    if target.exists():
        return False
    # Named by process and thread: two threads of one process (labs run side by
    # side in one program) may claim the same id at once, and each needs its own.
    tmp = STATE_ROOT / f"{CLAIMING}{lab_id}.{os.getpid()}.{threading.get_native_id()}"
    shutil.rmtree(tmp, ignore_errors=True)  # one left by a dead thread of these ids
    tmp.mkdir()
    try:
        _write_record(tmp, _owner_record(os.getpid(), False))
        os.rename(tmp, target)  # fails if another claimant's directory is there
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if target.exists():
            return False
        raise
    return True


def sweep_claims() -> list[str]:
    """Remove half-made claims whose claimant is dead; their names."""
    removed: list[str] = []
    if not STATE_ROOT.is_dir():
        return removed
    for d in STATE_ROOT.glob(f"{CLAIMING}*"):
        pid = d.name.rsplit(".", 2)[-2] if d.name.count(".") >= 2 else ""
        if pid.isdigit() and procstat.start_time(int(pid)) is not None:
            continue  # its claimant may still be renaming it
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d.name)
    return removed


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
    return lab_id
