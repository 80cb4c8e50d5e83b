"""Who runs a run's cells: one lab here (serial), or many labs under Dask.

- :class:`SerialExecutor`: one :class:`~ptlab.experiment.runner.LabRunner`, its
  cells one after another (the namespace lab, or ptlab vm's three machines).
- :class:`DaskExecutor`: each cell is a Dask task (:mod:`.cellworker`), run by
  whichever worker is free in a lab of that worker's own. ``--jobs N`` starts N
  workers on this machine (Dask's LocalCluster: N labs side by side);
  ``--executor dask --scheduler tcp://HOST:8786`` hands the cells to an existing
  cluster, whose workers are root machines where ``scripts/setup`` ran. The
  scheduler, its retries and the clusters are Dask's: a worker that dies has its
  cells run elsewhere, and each cell's result is taken once.

Both give rows in completion order to ``on_row``; the run writes them in the
spec's order.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from io import BytesIO
from pathlib import Path
from typing import Any

from ..common.results import Row
from . import scoring
from .runner import LabRunner
from .spec import Spec

Cell = tuple[str, str]
OnRow = Callable[[Row], None]


class CellExecutor(ABC):
    """Runs cells and reports each row; one per run."""

    #: What the cells ran on, for provenance (no name that differs every run).
    machines_label: str = ""
    #: How much the workloads' timeouts were stretched (emulated machines).
    timeout_scale: float = 1.0
    #: How many labs measured at once on one machine: above 1, goodput and
    #: latency were measured under contention for its CPUs.
    labs_at_once: int = 1

    def __init__(self) -> None:
        self.integrity_failures: list[str] = []
        self.corrupted_cells: list[str] = []
        self.lab_ids: list[str] = []

    @abstractmethod
    def __enter__(self) -> CellExecutor: ...

    @abstractmethod
    def __exit__(self, *exc: object) -> None: ...

    @abstractmethod
    def describe(self) -> str:
        """What the cells run on, for the progress line."""

    @abstractmethod
    def run(self, cells: Sequence[Cell], on_row: OnRow) -> list[Row]:
        """Run `cells` and return their rows, expectations applied."""

    @abstractmethod
    def adopt_baselines(self, rows: list[Row]) -> None:
        """Earlier no-censor cells (a resumed run) stand for their rows' baselines."""


class SerialExecutor(CellExecutor):
    """One lab, the cells one after another."""

    def __init__(self, runner: LabRunner) -> None:
        super().__init__()
        self.runner = runner
        # The runner's lists, so failures are seen as they happen.
        self.integrity_failures = runner.integrity_failures
        self.corrupted_cells = runner.corrupted_cells

    def __enter__(self) -> SerialExecutor:
        self.runner.start()
        self.machines_label = self.runner.backend.machines_label
        self.timeout_scale = self.runner.backend.timeout_scale
        if (lab_id := getattr(self.runner.lab, "id", None)) is not None:
            self.lab_ids = [lab_id]
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.stop()

    def describe(self) -> str:
        return f"{self.runner.describe()} up, RTT {self.runner.rtt_ms} ms"

    def adopt_baselines(self, rows: list[Row]) -> None:
        self.runner.adopt_baselines(rows)

    def run(self, cells: Sequence[Cell], on_row: OnRow) -> list[Row]:
        return self.runner.run_matrix(on_row, list(cells))


def local_cpu_sets(jobs: int, per_lab: int = 2) -> list[list[int]] | None:
    """CPUs for each of `jobs` labs on this machine, when it has `per_lab` for each
    (a lab's censor, servers and clients need more than one); None otherwise."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < jobs * per_lab:
        return None
    size = len(cpus) // jobs
    return [cpus[i * size:(i + 1) * size] for i in range(jobs)]


class DaskExecutor(CellExecutor):
    """Cells as Dask tasks: N local workers (``--jobs N``), or a cluster's."""

    def __init__(self, spec: Spec, out_dir: Path, jobs: int | None = None,
                 scheduler: str | None = None, capture: bool = True,
                 retries: int = 2) -> None:
        super().__init__()
        if (jobs is None) == (scheduler is None):
            raise ValueError("a Dask executor needs either jobs or a scheduler address")
        self.spec, self.out, self.jobs, self.scheduler = spec, Path(out_dir), jobs, scheduler
        self.capture, self.retries = capture, retries
        self.run_id = uuid.uuid4().hex[:12]
        self.cluster: Any = None
        self.client: Any = None
        self.workers: set[str] = set()
        self.cpu_sets = local_cpu_sets(jobs) if jobs else None
        self._cpu_of: dict[str, list[int]] = {}
        self._baselines: dict[str, dict[str, Any]] = {}  # transport -> its none row
        # Local workers (--jobs), as (pid, start time): the owners of our labs.
        self._workers: set[tuple[int, int | None]] = set()

    def __enter__(self) -> DaskExecutor:
        from distributed import Client, LocalCluster

        if self.jobs is not None:
            from .quietworkers import IgnoreInterrupt, interrupts_ignored

            # One process per lab, one cell at a time each; Dask's own dashboard off.
            # Ctrl-C is the run's: its workers ignore SIGINT (quietworkers).
            with interrupts_ignored():
                # The scheduler serves HTTP (health, metrics) even with no dashboard,
                # on 8787 by default: a second run at once warned that it was taken.
                self.cluster = LocalCluster(n_workers=self.jobs, threads_per_worker=1,
                                            processes=True, dashboard_address=None,
                                            scheduler_kwargs={"dashboard": False,
                                                              "dashboard_address": ":0"},
                                            silence_logs=40)
            self.client = Client(self.cluster)
            self.client.register_plugin(IgnoreInterrupt())
            self._note_workers()
            self.labs_at_once = self.jobs
            self.machines_label = f"{self.jobs} labs at once on this machine (Dask)"
        else:
            self.client = Client(self.scheduler, timeout="30s")
            workers = self.client.scheduler_info()["workers"]
            hosts = {w.get("host") for w in workers.values()}
            # Several workers on one host share its CPUs, as --jobs does.
            self.labs_at_once = max(1, max((sum(1 for w in workers.values()
                                                if w.get("host") == h) for h in hosts),
                                           default=1))
            self.machines_label = (f"Dask workers on {len(hosts)} machine(s), "
                                   f"{len(workers)} labs")
        if self.cpu_sets:
            # Each local lab on CPUs of its own, so labs side by side do not compete:
            # the worker's affinity, which every process of its lab inherits.
            from .cellworker import pin

            for address, cpus in zip(sorted(self.client.scheduler_info()["workers"]),
                                     self.cpu_sets, strict=False):
                self.client.run(pin, cpus, workers=[address])
                self._cpu_of[address] = cpus
        return self

    def _note_workers(self) -> None:
        """Remember the local workers now running (a nanny may have restarted one)."""
        from netns import procstat

        with contextlib.suppress(OSError, TimeoutError, RuntimeError):
            for pid in self.client.run(os.getpid).values():
                self._workers.add((pid, procstat.start_time(pid)))

    def __exit__(self, *exc: object) -> None:
        from .cellworker import close_run

        if self.cluster is not None:
            self._note_workers()
        # Stopped mid-run (Ctrl-C, SIGTERM, a full disk), a worker would close its lab
        # only after the cell it is running, minutes for some: our own workers are
        # stopped instead, and their labs taken down below.
        stopped = exc[0] is not None and self.cluster is not None
        try:
            if not stopped:
                events = self.client.run(close_run, self.run_id)
                self._append_events([line for lines in events.values() for line in lines])
        except (OSError, TimeoutError, RuntimeError):
            pass  # a worker gone: its lab is an orphan, for ptlab lab down
        finally:
            self.client.close()
            if self.cluster is not None:
                self.cluster.close()
                down_labs_of(self._workers)
                # And the workers' files for this run (those of a worker that died or
                # was stopped mid-cell, which its close never removed): local workers
                # share this machine's disk.
                from .cellworker import WORK_ROOT

                shutil.rmtree(WORK_ROOT / self.run_id, ignore_errors=True)

    def describe(self) -> str:
        return self.machines_label

    def adopt_baselines(self, rows: list[Row]) -> None:
        self._baselines.update({r.transport: r.to_dict() for r in rows
                                if r.censor == scoring.BASELINE})

    def _task(self, cell: Cell) -> Any:
        from .cellworker import CellTask

        overrides = {k: (v, self.spec.overridden[k])
                     for k, v in self.spec.settings().items() if k in self.spec.overridden}
        baselines = [self._baselines[cell[0]]] if cell[0] in self._baselines else []
        return CellTask(self.run_id, str(self.spec.path or ""), self.spec.raw, overrides,
                        cell[0], cell[1], self.capture, baselines)

    def _append_events(self, lines: list[str]) -> None:
        if lines:
            with open(self.out / "events.jsonl", "a") as out:
                out.write("\n".join(lines) + "\n")

    def _unpack(self, files: bytes) -> None:
        with tarfile.open(fileobj=BytesIO(files), mode="r:*") as tar:
            tar.extractall(self.out, filter="data")

    def run(self, cells: Sequence[Cell], on_row: OnRow) -> list[Row]:
        from distributed import as_completed

        from .cellworker import run_cell

        self.out.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        futures = {self.client.submit(run_cell, self._task(c), key=f"ptlab-{self.run_id}-{i}",
                                      retries=self.retries, pure=False): c
                   for i, c in enumerate(cells)}
        rows: list[Row] = []
        seen: set[Cell] = set()
        over_budget = False
        for future in as_completed(futures):
            cell = futures[future]
            if cell in seen:  # never counted twice, whatever the retries did
                continue
            seen.add(cell)
            if not over_budget and time.monotonic() - started > self.spec.budget_s:
                over_budget = True  # as a serial run does: the rest is not run
                for f in futures:
                    if not f.done():
                        f.cancel()
            if future.cancelled():
                row = Row(cell[0], cell[1], "ERROR",
                          error=f"over the wall-time budget ({self.spec.budget_s:.0f} s)")
                scoring.apply_expectations(row, self.spec.expect)
                rows.append(row)
                on_row(row)
                continue
            try:
                result = future.result()
            except Exception as exc:  # the cell could not be run at all, anywhere
                row = Row(cell[0], cell[1], "ERROR",
                          error=f"the cell's task failed: {type(exc).__name__}: {exc}")
            else:
                row = Row.from_dict(result.row)
                self._unpack(result.files)
                self._append_events(result.events)
                self.workers.add(result.worker)
                if result.lab_id and result.lab_id not in self.lab_ids:
                    self.lab_ids.append(result.lab_id)
                if result.integrity_failure:
                    self.integrity_failures.append(result.integrity_failure)
                    self.corrupted_cells.append(row.cell)
            scoring.apply_expectations(row, self.spec.expect)
            rows.append(row)
            on_row(row)
        return rows


def down_labs_of(workers: set[tuple[int, int | None]]) -> list[str]:
    """Take down the labs these (local, now stopped) worker processes owned, each
    named by its pid and start time.

    A worker takes its lab down when the run closes it, and at exit. But a run that
    stops on an error can close its cluster while a worker is still bringing a
    lab up for its next cell: the worker is killed, and its lab's namespaces and
    processes stay, an orphan. Everything the run made goes on its way out, so
    these are removed here, not left for ``ptlab lab down``. Another lab on the
    machine is never touched: a live owner's, or a dead one's that is not ours
    (even one whose pid a worker of ours was later given: the start times differ)."""
    from netns import cleanup, ownership

    removed = []
    for lab_id in sorted(cleanup.all_lab_ids()):
        owner = ownership.read_owner(lab_id)
        if owner is not None and (owner.pid, owner.start) in workers and not owner.alive():
            cleanup.down(lab_id)
            removed.append(lab_id)
    return removed


def clean_out(out: Path) -> None:
    """Remove a run's half-written cell files (for a run started over)."""
    shutil.rmtree(out / "cells", ignore_errors=True)
