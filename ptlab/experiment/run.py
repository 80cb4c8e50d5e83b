"""One experiment from spec to report: runner, results files, HTML report, terminal table."""

from __future__ import annotations

import errno
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from censor_sim.profile import load_profile, profile_path
from netns.capture import WHOLE_PACKETS
from netns.errors import LabError

from ..common.exitcodes import EXIT_ERROR_CELL
from ..common.results import (
    PEER_BINARIES,
    Results,
    load_results,
    now_iso,
    provenance,
    write_results,
)
from ..common.specfile import flatten_keys
from ..output.report import render_report
from ..output.runindex import write_index
from ..output.terminal import print_results, progress
from .executors import CellExecutor, DaskExecutor, SerialExecutor
from .runner import LabRunner
from .spec import Spec


class RunStopped(LabError):
    """The run could not write what it measured (a full disk) and stopped; what it
    wrote before stays, for ``--resume``."""

    # As for a cell that could not be measured: the machine failed, not a transport.
    exit_code = EXIT_ERROR_CELL

    def __init__(self, out_dir: Path, exc: OSError) -> None:
        why = exc.strerror or str(exc)
        where = exc.filename or out_dir
        try:  # what the results directory really holds, read as --resume reads it
            kept: int | None = len(load_results(out_dir).rows)
        except (OSError, ValueError):
            kept = None
        then = (f"{out_dir / 'results.json'} holds the {kept} cells written before it: free "
                f"the space and finish with `ptlab run SPEC --resume {out_dir} "
                "--retry-errors` (which also runs again the cells that failed with it)"
                if kept is not None else "no results were kept: free the space and run it "
                "again")
        super().__init__(f"the run stopped: writing {where} failed ({why}); {then}")


#: Errors that say the disk (or the user's share of it) is full: wherever a run meets
#: one (its results, a cell's captures, the report), it stops as RunStopped.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


@dataclass
class Outcome:
    results: Results
    out_dir: Path
    report: Path
    seconds: float
    failed_expectations: list[str] = field(default_factory=list)
    integrity_failures: list[str] = field(default_factory=list)
    error_cells: list[str] = field(default_factory=list)  # "transport × censor: why"
    corrupted_cells: list[str] = field(default_factory=list)  # "transport × censor"


def run_experiment(spec: Spec, out_dir: Path, console=None, lab_id: str | None = None,
                   capture: bool = True, runner: LabRunner | None = None,
                   prior: Results | None = None,
                   executor: CellExecutor | None = None) -> Outcome:
    """Run `spec` and write results.json, results.csv and report.html to `out_dir`
    (:func:`_run_experiment`); a full disk met anywhere on the way stops the run as
    :class:`RunStopped`, its labs taken down, what it wrote kept."""
    try:
        return _run_experiment(spec, out_dir, console, lab_id, capture, runner, prior,
                               executor)
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        raise RunStopped(out_dir, exc) from None


def _run_experiment(spec: Spec, out_dir: Path, console=None, lab_id: str | None = None,
                    capture: bool = True, runner: LabRunner | None = None,
                    prior: Results | None = None,
                    executor: CellExecutor | None = None) -> Outcome:
    """Run `spec` and write results.json, results.csv and report.html to `out_dir`.

    `executor` runs the cells: by default one lab here, through `runner` (the
    namespace lab unless ``ptlab vm run`` passes a
    :class:`ptlab.vm.runner.VmRunner`); a :class:`DaskExecutor` runs them on many
    labs. With `prior` (``ptlab run --resume``), the cells it holds are kept, not
    run again, and its rows' no-censor baselines stand for their transports.
    """
    started, t0 = (prior.started if prior else now_iso()), time.monotonic()
    kept = list(prior.rows) if prior else []
    done_cells = {(r.transport, r.censor) for r in kept}
    cells = [c for c in spec.selected_cells() if c not in done_cells]
    log = console.print if console else print
    profile_files = sorted({profile_path(spec.censor_profile(c)[0]) for c in spec.censors})
    rows = spec.rows()
    peers = sorted(set(PEER_BINARIES) | {b for r in rows for b in r.plugin.peer_binaries()})
    capturing = runner.capture if runner is not None else capture
    executor = executor or SerialExecutor(
        runner or LabRunner(spec, out_dir, lab_id=lab_id, capture=capture, log=log))
    executor.adopt_baselines(kept)
    order = {cell: i for i, cell in enumerate(spec.cells())}
    with progress(console) as bar:
        task = bar.add_task(f"{spec.name}: starting the lab", total=len(cells))
        with executor:
            bar.update(task, description=f"{spec.name}: {executor.describe()}")

            prov = provenance({"experiment": spec.seed}, profile_files, peers)
            # What each row runs (whose implementation, which stacks), for the report.
            prov["transports"] = {r.name: r.plugin.description for r in rows}
            prov["machines"] = executor.machines_label  # no id: compare ignores nothing
            if executor.lab_ids:
                prov["lab_id"] = ",".join(executor.lab_ids)  # differs every run
            prov["censors"] = censor_columns(spec)
            prov["tools"] = tool_builds(spec)
            settings, origins = run_settings(spec, executor.timeout_scale,
                                             executor.labs_at_once)
            if prior is not None:
                prov["resumed"] = [*prior.provenance.get("resumed", []), now_iso()]
            # Bytes kept of each captured packet (docs/lab/results.md §8), or no captures.
            prov["capture"] = ({"snaplen": spec.capture_snaplen,
                                "whole_packets": spec.capture_snaplen >= WHOLE_PACKETS}
                               if capturing else {"snaplen": None, "whole_packets": None})
            done: list = []

            def results_so_far(rows: list) -> Results:
                every = sorted([*kept, *rows],
                               key=lambda r: order.get((r.transport, r.censor), len(order)))
                return Results(started=started, finished=now_iso(),
                               spec_path=str(spec.path or ""), spec=spec.raw,
                               settings=settings, setting_origins=origins,
                               selection=spec.selection.to_json(), provenance=prov,
                               rows=every)

            def on_row(row) -> None:
                bar.advance(task)
                bar.update(task, description=f"{row.transport} × {row.censor}: {row.status}")
                # Partial results after every row: a killed run still leaves its data.
                done.append(row)
                try:
                    write_results(results_so_far(done), out_dir)
                except OSError as exc:
                    # A full disk, say: the last whole results.json stays (the write is
                    # atomic), the labs come down on the way out, and --resume goes on.
                    raise RunStopped(out_dir, exc) from None

            measured = executor.run(cells, on_row)
            if isinstance(executor, DaskExecutor):
                prov["workers"] = sorted(executor.workers)
                if executor.lab_ids:
                    prov["lab_id"] = ",".join(executor.lab_ids)
    results = results_so_far(measured)
    write_results(results, out_dir)
    report = render_report(out_dir)
    write_index(out_dir.resolve().parent)  # the index of the runs beside this one
    if console is not None:
        print_results(results, console)
    failed = [f"{r.transport} × {r.censor}: expected {r.expectation}, got {r.status}"
              + (f" ({r.error})" if r.error else "")
              for r in results.rows if r.expectation_met is False]
    errors = [f"{r.cell}: {r.error or 'no reason recorded'}"
              for r in results.rows if r.status == "ERROR"]
    return Outcome(results, out_dir, report, time.monotonic() - t0, failed,
                   executor.integrity_failures, errors, executor.corrupted_cells)


def run_settings(spec: Spec, timeout_scale: float,
                 labs_at_once: int = 1) -> tuple[dict[str, Any], dict[str, str]]:
    """The run's effective settings and their origins: the spec's, how much the
    backend stretched the workloads' timeouts (1 on this machine's namespaces),
    and how many labs measured at once on one machine (above 1, goodput and
    latency were measured under contention)."""
    settings, origins = spec.settings(), spec.setting_origins()
    settings["run.timeout_scale"] = timeout_scale
    origins["run.timeout_scale"] = "backend"
    settings["run.labs_at_once"] = labs_at_once
    origins["run.labs_at_once"] = "executor"
    return settings, origins


def tool_builds(spec: Spec) -> dict[str, dict[str, Any]]:
    """Each tool the rows name as {tool.NAME}: its path, where it was found, its
    version line, revision, build tags and SHA-256 (ptlab/common/tools.py), or why it
    could not be found."""
    out: dict[str, dict[str, Any]] = {}
    for row in spec.rows():
        plugin = row.plugin
        for name in plugin.tools():
            if name not in out:
                try:
                    out[name] = plugin.resolve_tool(name).provenance()
                except OSError as exc:
                    out[name] = {"error": str(exc)}
    return out


def censor_columns(spec: Spec) -> dict[str, dict[str, Any]]:
    """Per censor column: the profile, its cited source, the hash of its file and of
    the effective profile (overrides applied), and each override beside the value
    the profile's source gives. A report that hides an override (FET's p = 0.263
    raised to 1.0) misreports the paper it cites."""
    out: dict[str, dict[str, Any]] = {}
    for column in spec.censors:
        name, overrides = spec.censor_profile(column)
        base = load_profile(name)
        effective = load_profile(name, overrides)
        base_keys = flatten_keys(base.to_dict())
        out[column] = {
            "profile": name, "source": base.source, "file_sha256": base.sha256,
            "effective_sha256": hashlib.sha256(json.dumps(
                effective.to_dict(), sort_keys=True, default=str).encode()).hexdigest(),
            "overrides": [{"key": k, "value": v, "source_value": base_keys.get(k)}
                          for k, v in flatten_keys(overrides).items()],
        }
    return out
