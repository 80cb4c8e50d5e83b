"""The terminal table shows every cell's status, numbers and expectation."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress

from ptlab.common.results import Results
from ptlab.output.terminal import print_results, progress, results_table
from tests.support.rows import blocked_row, error_row, reachable_row, skipped_row


def make_results() -> Results:
    rows = [reachable_row(repetitions_ok=3, reachability_ci95=(0.44, 1.0)),
            blocked_row(censor="gfw[bold]", collateral=0.125, benign_total=8, benign_blocked=1,
                        benign_detail={"binary": {"ok": 0, "blocked": 1},
                                       "https": {"ok": 7, "blocked": 0}},
                        repetitions=3, repetitions_ok=0, action="residual",
                        detection_data_packet=1),
            error_row(), skipped_row(), skipped_row(censor="gfw")]
    return Results(started="a", finished="b", spec_path="x.toml", rows=rows)


def _render(results: Results) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    print_results(results, console=console)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_table_text() -> None:
    text = _render(make_results())
    for word in ("reachable", "blocked", "ERROR", "obfs4", "meek", "fet"):
        assert word in text
    assert "reachable 3/3" in text and "blocked 0/3" in text  # k of n
    assert "42.0 [40.0, 44.0] n=3" in text  # the interval and its n (3 significant figures)
    assert "21.5 [20.0, 23.0] n=3" in text  # the median's
    assert "binary 1/1" in text  # which benign class broke, k/n
    assert "fet @1 → residual" in text
    assert "✓" in text and "✗ want reachable" in text
    assert "gfw[bold]" in text  # names are not parsed as markup
    assert "RTT 20 ms" in text
    assert "ERROR meek × none: bridge not ready" in text
    # A skipped row's reason, once for the row however many censors it has.
    assert text.count("skipped sb-vless-reality: needs sing-box built with with_utls") == 1


def test_table_colours_status() -> None:
    console = Console(file=io.StringIO(), width=200, force_terminal=True, color_system="standard")
    console.print(results_table(make_results()))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[1;32mreachable" in out  # bold green
    assert "\x1b[1;31mblocked" in out  # bold red


def test_record_console_export() -> None:
    console = Console(record=True, width=200, file=io.StringIO())
    print_results(make_results(), console=console)
    text = console.export_text()
    assert "reachable" in text and "blocked" in text and "ERROR" in text


def test_table_row_count() -> None:
    table = results_table(make_results())
    assert table.row_count == 5
    assert len(table.columns) == 8


def test_progress_columns() -> None:
    console = Console(file=io.StringIO(), width=120, force_terminal=False)
    prog = progress(console=console)
    assert isinstance(prog, Progress)
    assert any(isinstance(c, MofNCompleteColumn) for c in prog.columns)
    with prog:
        task = prog.add_task("obfs4 × [gfw]", total=4)
        prog.advance(task, 3)
        assert prog.tasks[0].completed == 3
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "obfs4 × [gfw]" in out  # descriptions print verbatim, not as markup
    assert "3/4" in out
