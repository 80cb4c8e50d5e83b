"""What a run will cost before it starts: ``ptlab run --check``'s wall-time estimate.

A 966-cell matrix is hours of machine time; a researcher should know that before
the lab comes up. Past runs are the best guide: every row records its cell's wall
time (``cell_seconds``), so a cell that ran before with the same workloads is
estimated by the median of those times. Any other cell gets the workloads' own
arithmetic: the processes' start, each repetition's download at a modest rate, the
latency samples, and the benign mix's timeout.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..common.results import Results
from ..output.runindex import find_run_results
from .spec import Spec

#: Bringing the lab up and its services, once per run (measured: 15-25 s here).
LAB_UP_S = 20.0
#: A cell's own start and stop: censor, servers, clients, captures (measured: 3-6 s).
CELL_OVERHEAD_S = 5.0
#: The rate a repetition's download is assumed to move at when nothing better is
#: known: slow transports (tor, Snowflake) are near it, fast ones far above.
ASSUMED_MBIT_S = 50.0
#: One latency sample's round trips and their pause.
LATENCY_SAMPLE_S = 0.1

Cell = tuple[str, str]


@dataclass
class Estimate:
    seconds: float
    from_history: int = 0  # cells estimated from earlier runs of the same cell
    from_workloads: int = 0  # cells estimated from the workloads alone
    per_cell: dict[Cell, float] = field(default_factory=dict)

    def text(self) -> str:
        minutes, seconds = divmod(round(self.seconds), 60)
        hours, minutes = divmod(minutes, 60)
        when = f"{hours} h {minutes} min" if hours else f"{minutes} min {seconds} s"
        return (f"estimated wall time: {when} serially ({self.from_history} cells from "
                f"earlier runs, {self.from_workloads} from the workloads)")


def workload_seconds(spec: Spec, repetitions: int) -> float:
    """One cell's time from the workloads alone."""
    w = spec.workloads
    bulk = repetitions * (w.bulk_size * 8 / (ASSUMED_MBIT_S * 1e6))
    return (CELL_OVERHEAD_S + bulk + w.latency_count * LATENCY_SAMPLE_S
            + (w.benign_timeout_s if w.benign else 0.0))


def _comparable(past: Results, spec: Spec) -> bool:
    """Whether a past run measured with these workloads (its times then apply)."""
    mine = spec.settings()
    keys = [k for k in mine if k.startswith("workloads.") or k == "experiment.repetitions"]
    return bool(past.settings) and all(past.settings.get(k) == mine[k] for k in keys)


def history(root: Path, spec: Spec) -> dict[Cell, list[float]]:
    """Wall times of earlier runs' cells under `root` that ran these workloads."""
    times: dict[Cell, list[float]] = {}
    for past in find_run_results(root):
        if not _comparable(past, spec):
            continue
        for row in past.rows:
            if row.cell_seconds is not None and row.status != "skipped":
                times.setdefault((row.transport, row.censor), []).append(row.cell_seconds)
    return times


def estimate(spec: Spec, cells: Sequence[Cell], baselines: Sequence[str],
             results_root: Path | None = None) -> Estimate:
    """The run's wall time, serially: lab up, then every cell, then each baseline the
    selection needs (one repetition, no latency)."""
    past = history(results_root, spec) if results_root and results_root.is_dir() else {}
    out = Estimate(LAB_UP_S)
    for cell in cells:
        if cell in past:
            seconds = statistics.median(past[cell])
            out.from_history += 1
        else:
            seconds = workload_seconds(spec, spec.repetitions)
            out.from_workloads += 1
        out.per_cell[cell] = seconds
        out.seconds += seconds
    out.seconds += len(baselines) * workload_seconds(spec, 1)
    return out
