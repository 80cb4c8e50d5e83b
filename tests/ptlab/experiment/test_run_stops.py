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

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

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
        for transport, censor in cells:
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


def test_the_cli_says_it_in_one_line_with_its_exit_status(monkeypatch, capsys, tmp_path):
    from ptlab import cli
    from ptlab.commands import run as run_command

    def stops(args) -> int:
        raise run_module.RunStopped(tmp_path, 7, OSError(errno.ENOSPC,
                                                         "No space left on device"))

    monkeypatch.setattr(run_command, "cmd_run", stops)
    assert cli.main(["run", "whatever.toml"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ptlab: the run stopped: ")
