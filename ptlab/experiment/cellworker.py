"""One cell, run where a Dask worker runs: the task that spreads a matrix over labs.

Every cell of a matrix is independent: it brings up its own censor and servers
in a lab that any machine where ``scripts/setup`` ran can build. A worker keeps
one lab per run (its own id and namespaces) across the cells it is given, since
bringing a lab up costs more than most cells, and measures each row's no-censor
baseline the first time it runs a cell of that row, as a serial run does. The
task hands back the row, the cell's files (logs and captures, as a tar) and the
events its processes logged, so the submitting machine writes the results
directory as a serial run would.

A worker that dies takes its lab with it: the lab's owner is gone, and ``ptlab
lab down`` (or the next run's clean-up of orphans) removes what is left. Dask
runs the dead worker's cells elsewhere.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.results import Row, git_state
from .runner import LabRunner
from .spec import Spec, parse_spec

#: Where a worker keeps its labs' files until a task hands them back.
WORK_ROOT = Path(os.environ.get("PTLAB_WORKER_DIR", tempfile.gettempdir())) / "ptlab-worker"


@dataclass
class CellTask:
    """What a worker needs to run a cell: the spec as read (its TOML), the command
    line's overrides, and the cell."""

    run_id: str
    spec_path: str
    raw: dict[str, Any]
    overrides: dict[str, tuple[Any, str]]  # setting key -> (value, origin)
    transport: str
    censor: str
    capture: bool = True
    baselines: list[dict[str, Any]] = field(default_factory=list)  # earlier none rows


@dataclass
class CellResult:
    row: dict[str, Any]
    files: bytes  # a tar of the cell's directories and captures, relative to the results
    events: list[str] = field(default_factory=list)  # events.jsonl lines
    integrity_failure: str | None = None
    worker: str = ""  # which worker ran it (hostname:pid), for provenance
    git_sha: str = "unknown"
    lab_id: str | None = None


class _Lab:
    """A worker's lab for one run, and what it has handed back so far."""

    def __init__(self, task: CellTask) -> None:
        self.spec = build_spec(task)
        self.dir = WORK_ROOT / task.run_id / f"{os.getpid()}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.runner = LabRunner(self.spec, self.dir, capture=task.capture,
                                log=lambda *a: None)
        self.runner.start()
        self.events_read = 0
        self.failures_read = 0

    def new_events(self) -> list[str]:
        path = self.runner.events_path
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        new, self.events_read = lines[self.events_read:], len(lines)
        return new


_LABS: dict[str, _Lab] = {}
_LOCK = threading.Lock()


def build_spec(task: CellTask) -> Spec:
    """The spec as the submitting machine read it, with its command-line overrides."""
    spec = parse_spec(task.raw, Path(task.spec_path) if task.spec_path else None)
    for key, (value, origin) in task.overrides.items():
        spec.override(key, value, origin)
    return spec


def pin(cpus: list[int]) -> None:
    """Keep this worker and every process it starts (the lab's) on `cpus`."""
    os.sched_setaffinity(0, cpus)


def _pack(root: Path, names: list[str], pcaps: list[str]) -> bytes:
    """The cell's directories and its captures (pcaps/, with their tcpdump logs), as
    a tar whose paths are the results directory's. Not compressed: whole-packet
    captures are most of it, hundreds of MB a cell, and compress little and slowly."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in names:
            path = root / "cells" / name
            if path.exists():
                tar.add(path, arcname=f"cells/{name}")
        for name in pcaps:
            path = root / "pcaps" / name
            if path.exists():
                tar.add(path, arcname=f"pcaps/{name}")
    return buf.getvalue()


def run_cell(task: CellTask) -> CellResult:
    """Run one cell in this worker's lab for the run (brought up on first use)."""
    with _LOCK:  # one cell at a time per worker: a lab measures one cell at once
        lab = _LABS.get(task.run_id)
        if lab is None:
            lab = _LABS[task.run_id] = _Lab(task)
        lab.runner.adopt_baselines([Row.from_dict(r) for r in task.baselines])
        cells_before = set(_cell_dirs(lab.dir))
        pcaps_before = set(_pcap_files(lab.dir))
        row: Row = lab.runner.run_cell(task.transport, task.censor)
        new_dirs = sorted(set(_cell_dirs(lab.dir)) - cells_before)
        new_pcaps = sorted(set(_pcap_files(lab.dir)) - pcaps_before)
        failures = lab.runner.integrity_failures[lab.failures_read:]
        lab.failures_read = len(lab.runner.integrity_failures)
        result = CellResult(
            row=row.to_dict(), files=_pack(lab.dir, new_dirs, new_pcaps),
            events=lab.new_events(),
            integrity_failure=failures[-1] if failures else None,
            worker=f"{os.uname().nodename}:{os.getpid()}", git_sha=git_state()[0],
            lab_id=getattr(lab.runner.lab, "id", None))
        for name in new_dirs:  # handed back: the worker keeps no copy
            shutil.rmtree(lab.dir / "cells" / name, ignore_errors=True)
        for name in new_pcaps:  # nor of its captures, which would fill its disk
            (lab.dir / "pcaps" / name).unlink(missing_ok=True)
        return result


def _pcap_files(root: Path) -> list[str]:
    pcaps = root / "pcaps"
    return [p.name for p in pcaps.iterdir() if p.is_file()] if pcaps.is_dir() else []


def _cell_dirs(root: Path) -> list[str]:
    cells = root / "cells"
    return [p.name for p in cells.iterdir()] if cells.is_dir() else []


def close_run(run_id: str) -> list[str]:
    """Take this worker's lab for the run down; the events its lab services logged
    since the last cell."""
    with _LOCK:
        lab = _LABS.pop(run_id, None)
        if lab is None:
            return []
        try:
            lab.runner.stop()
            return lab.new_events()
        finally:
            shutil.rmtree(lab.dir, ignore_errors=True)
            with contextlib.suppress(OSError):  # the run's directory, once no worker's
                lab.dir.parent.rmdir()


@atexit.register
def _close_all() -> None:
    """A worker that exits takes its labs down (one killed outright leaves orphans
    for ``ptlab lab down``)."""
    for run_id in list(_LABS):
        close_run(run_id)
