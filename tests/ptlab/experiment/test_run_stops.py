"""A run that cannot write its results (a full disk) stops: one line, exit 4, the labs
taken down on the way out, and the results it wrote before kept for --resume."""

from __future__ import annotations

import errno
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from ptlab.experiment import run as run_module
from ptlab.experiment.executors import CellExecutor
from ptlab.experiment.spec import parse_spec
from tests.support.rows import reachable_row


class RowsOnly(CellExecutor):
    """Hands over made-up rows, one per cell, with no lab; says whether it was closed."""

    machines_label = "no lab (test)"

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.closed = False
        self.fail_at = fail_at  # the cell whose own files meet a full disk

    def __enter__(self) -> RowsOnly:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True

    def describe(self) -> str:
        return "no lab"

    def adopt_baselines(self, rows: list) -> None:
        pass

    def run(self, cells: Sequence[tuple[str, str]], on_row) -> list:
        rows = []
        for i, (transport, censor) in enumerate(cells):
            if i == self.fail_at:  # as a worker's captures are unpacked, before on_row
                raise OSError(errno.ENOSPC, "No space left on device", "cells/x.pcap")
            row = reachable_row(transport=transport, censor=censor, expectation=None,
                                expectation_met=None)
            on_row(row)
            rows.append(row)
        return rows


def test_a_full_disk_stops_the_run_keeping_what_it_wrote(tmp_path, monkeypatch):
    spec = parse_spec({"transports": {"direct": {}, "obfs4": {}},
                       "censors": {"none": {}, "ip-blocklist": {}}})
    real_write = run_module.write_results
    writes: list[int] = []

    def write_until_the_disk_fills(results, directory: Path) -> None:
        writes.append(len(results.rows))
        if len(writes) >= 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(results, directory)

    monkeypatch.setattr(run_module, "write_results", write_until_the_disk_fills)
    executor = RowsOnly()
    with pytest.raises(run_module.RunStopped) as stopped:
        run_module.run_experiment(spec, tmp_path, executor=executor)
    message = str(stopped.value)
    assert "No space left on device" in message and "holds the 2 cells" in message
    assert f"--resume {tmp_path}" in message and "\n" not in message
    assert stopped.value.exit_code == 4
    assert executor.closed  # the labs came down on the way out
    kept = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [(r["transport"], r["censor"]) for r in kept] == [("direct", "none"),
                                                              ("direct", "ip-blocklist")]


def spec_of_four():
    return parse_spec({"transports": {"direct": {}, "obfs4": {}},
                       "censors": {"none": {}, "ip-blocklist": {}}})


def test_a_full_disk_met_outside_the_results_stops_the_run_too(tmp_path):
    """A cell's own files (a worker's captures) meet the full disk before its row is
    written: the same stop, naming the file."""
    executor = RowsOnly(fail_at=3)
    with pytest.raises(run_module.RunStopped) as stopped:
        run_module.run_experiment(spec_of_four(), tmp_path, executor=executor)
    assert "writing cells/x.pcap failed (No space left on device)" in str(stopped.value)
    assert "holds the 3 cells" in str(stopped.value) and executor.closed


def test_with_nothing_written_it_says_to_run_again_not_to_resume(tmp_path, monkeypatch):
    def full(results, directory: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_module, "write_results", full)
    with pytest.raises(run_module.RunStopped) as stopped:
        run_module.run_experiment(spec_of_four(), tmp_path, executor=RowsOnly())
    assert "no results were kept: free the space and run it again" in str(stopped.value)
    assert "--resume" not in str(stopped.value)


def test_other_errors_are_not_taken_for_a_full_disk(tmp_path):
    class Broken(RowsOnly):
        def run(self, cells, on_row):
            raise OSError(errno.EACCES, "Permission denied")

    with pytest.raises(PermissionError):
        run_module.run_experiment(spec_of_four(), tmp_path, executor=Broken())


def test_the_cli_says_it_in_one_line_with_its_exit_status(monkeypatch, capsys, tmp_path):
    from ptlab import cli
    from ptlab.commands import run as run_command

    def stops(args) -> int:
        raise run_module.RunStopped(tmp_path, OSError(errno.ENOSPC,
                                                      "No space left on device"))

    monkeypatch.setattr(run_command, "cmd_run", stops)
    assert cli.main(["run", "whatever.toml"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ptlab: the run stopped: ")


def test_retry_errors_runs_the_error_cells_again_and_keeps_the_rest(tmp_path):
    """After a stop like the one above, `--resume DIR --retry-errors` measures the cells
    the machine failed (ERROR) again, with those the run lacks, and keeps the others."""
    from ptlab.commands.run import without_errors
    from ptlab.common.results import Results, load_results, write_results

    spec = spec_of_four()
    earlier = [reachable_row(transport="direct", censor="none", expectation=None,
                             expectation_met=None),
               reachable_row(transport="direct", censor="ip-blocklist", status="ERROR",
                             error="the cell's task failed: OSError: No space left",
                             expectation=None, expectation_met=None)]
    write_results(Results(started="2026-11-28T20:00:00+00:00", finished="",
                          spec_path="", rows=earlier), tmp_path)
    ran: list[tuple[str, str]] = []

    class Recording(RowsOnly):
        def run(self, cells, on_row):
            ran.extend(cells)
            return super().run(cells, on_row)

    prior = without_errors(load_results(tmp_path))
    run_module.run_experiment(spec, tmp_path, executor=Recording(), prior=prior)
    assert ("direct", "ip-blocklist") in ran and ("direct", "none") not in ran
    rows = {(r.transport, r.censor): r.status for r in load_results(tmp_path).rows}
    assert rows[("direct", "ip-blocklist")] == "reachable" and len(rows) == 4


def test_retry_errors_needs_resume(capsys):
    from ptlab import cli

    assert cli.main(["run", "--retry-errors"]) == 2
    assert "--retry-errors goes with --resume DIR" in capsys.readouterr().err
