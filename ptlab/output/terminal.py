"""Terminal output for runs: the results table and the runner's per-cell progress bar.

Rich is used so the matrix reads at a glance (status in colour) without the
HTML report; the table states the RTT too, as every report must.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from ptlab.common.results import Results, Row
from ptlab.output import cellfmt

STATUS_STYLES = {"reachable": "bold green", "blocked": "bold red", "ERROR": "bold white on grey39",
                 "skipped": "yellow"}


def _expectation(row: Row) -> Text:
    if row.expectation_met is None:
        return Text("—", style="dim")
    if row.expectation_met:
        return Text("✓", style="green")
    return Text(f"✗ want {row.expectation}", style="bold red")


def results_table(results: Results) -> Table:
    """One line per cell: status with k of n, goodput and latency with their
    intervals and n, the benign classes broken, the transport's detection."""
    rtts = results.rtts_ms()
    caption = "RTT " + ", ".join(f"{x:g} ms" for x in rtts) if rtts else "RTT not recorded"
    labs = results.settings.get("run.labs_at_once", 1)
    if isinstance(labs, int) and labs > 1:
        caption += (f"; {labs} labs at once: goodput and latency measured under "
                    "contention")
    if any(r.latency_ci_level is not None and r.latency_ci_level < 0.95 for r in results.rows):
        caption += ("; latency CIs are 95 % unless marked (e.g. 75 % CI): too few samples "
                    "for a 95 % interval of the median")
    table = Table(title="ptlab results", caption=caption)
    table.add_column("transport")
    table.add_column("censor")
    table.add_column("status k/n")
    table.add_column("goodput Mbit/s [95 % CI]", justify="right")
    table.add_column("latency ms median [CI]", justify="right")
    table.add_column("collateral")
    table.add_column("detection")
    table.add_column("expect")
    for r in results.rows:
        # Text(...) rather than markup: names come from specs and must print verbatim.
        table.add_row(
            Text(r.transport),
            Text(r.censor),
            Text(cellfmt.status(r), style=STATUS_STYLES.get(r.status, "")),
            cellfmt.goodput(r),
            cellfmt.latency(r),
            Text(cellfmt.collateral(r)),
            Text(cellfmt.detection(r)),
            _expectation(r),
        )
    return table


def print_results(results: Results, console: Console | None = None) -> None:
    """Print the results table, plus the error line of each ERROR cell and the
    reason of each skipped row (once per row)."""
    # Piped or in a log, a table wide enough to read, not 80 squeezed columns.
    console = console if console is not None else Console(
        width=None if sys.stdout.isatty() else 132)
    console.print(results_table(results))
    skipped: set[str] = set()
    for r in results.rows:
        if r.status == "ERROR" and r.error:
            console.print(Text(f"ERROR {r.transport} × {r.censor}: {r.error}", style="grey50"))
        elif r.status == "skipped" and r.transport not in skipped:
            skipped.add(r.transport)
            console.print(Text(f"skipped {r.transport}: {r.error}", style="yellow"))


def progress(console: Console | None = None) -> Progress:
    """The runner's per-cell progress bar: spinner, description, bar, M/N, elapsed."""
    return Progress(
        SpinnerColumn(),
        # markup=False: descriptions are cell names, which may contain "[".
        TextColumn("{task.description}", style="progress.description", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
