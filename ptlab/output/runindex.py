"""The runs under a results directory: ``ptlab runs`` and ``results/index.html``.

A researcher comes back to a results directory weeks later; the index says what
each run was without opening it: when it ran, which spec, how many cells and
how they came out, and which code ran it. ``index.html`` links every run's
report and is rewritten after each run, so it is never stale for long.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from ..common.results import RESULTS_JSON, Results, load_results

INDEX_HTML = "index.html"


@dataclass
class RunSummary:
    """One run, as the index lists it."""

    directory: str  # relative to the results root
    started: str
    finished: str
    spec: str  # the spec's name, or its path
    spec_path: str
    cells: int
    statuses: dict[str, int] = field(default_factory=dict)  # status -> cells
    repetitions_ok: int = 0  # k summed over the measured cells
    repetitions: int = 0  # n summed likewise
    git_sha: str = "unknown"
    git_dirty: bool | None = None
    has_report: bool = False
    error: str | None = None  # why the run could not be read

    @property
    def summary(self) -> str:
        """e.g. "12 cells: 9 reachable, 3 blocked; 30/36 repetitions got through"."""
        if self.error:
            return f"unreadable: {self.error}"
        parts = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items()))
        return (f"{self.cells} cells: {parts}; {self.repetitions_ok}/{self.repetitions} "
                "repetitions got through")

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"summary": self.summary}


def summarise(directory: Path, root: Path) -> RunSummary:
    """The index's line for one run directory (one that holds results.json)."""
    rel = str(directory.relative_to(root))
    try:
        res = load_results(directory)
    except (OSError, ValueError) as exc:
        return RunSummary(rel, "", "", "?", "", 0, error=str(exc))
    exp = res.spec.get("experiment", {}) if isinstance(res.spec, dict) else {}
    measured = [r for r in res.rows if r.repetitions_ok is not None]
    return RunSummary(
        directory=rel, started=res.started, finished=res.finished,
        spec=str(exp.get("name") or Path(res.spec_path).stem or "?"),
        spec_path=res.spec_path, cells=len(res.rows),
        statuses=dict(Counter(r.status for r in res.rows)),
        repetitions_ok=sum(r.repetitions_ok or 0 for r in measured),
        repetitions=sum(r.repetitions for r in measured),
        git_sha=str(res.provenance.get("git_sha", "unknown")),
        git_dirty=res.provenance.get("git_dirty"),
        has_report=(directory / "report.html").exists())


def find_run_results(root: Path) -> list[Results]:
    """Every readable run under `root` (any depth); unreadable ones are passed over."""
    out = []
    for path in sorted(root.rglob(RESULTS_JSON)):
        try:
            out.append(load_results(path.parent))
        except (OSError, ValueError):
            continue
    return out


def find_runs(root: Path) -> list[RunSummary]:
    """Every run under `root` (any depth), newest first."""
    runs = [summarise(p.parent, root) for p in sorted(root.rglob(RESULTS_JSON))]
    return sorted(runs, key=lambda r: (r.started, r.directory), reverse=True)


def runs_text(runs: list[RunSummary]) -> str:
    if not runs:
        return "no runs\n"
    lines = []
    for r in runs:
        sha = r.git_sha[:10] + ("+dirty" if r.git_dirty else "")
        lines.append(f"{r.started or '?':25}  {r.spec:16}  {sha:16}  {r.directory}\n"
                     f"{'':27}{r.summary}")
    return "\n".join(lines) + "\n"


def runs_json(runs: list[RunSummary]) -> str:
    return json.dumps([r.to_json() for r in runs], indent=1) + "\n"


def index_html(runs: list[RunSummary]) -> str:
    body = []
    for r in runs:
        name = escape(r.directory)
        link = (f'<a href="{escape(r.directory)}/report.html">{name}</a>' if r.has_report
                else name)
        sha = escape(r.git_sha[:10]) + (" (dirty)" if r.git_dirty else "")
        body.append(f"<tr><td>{escape(r.started)}</td><td>{link}</td>"
                    f"<td>{escape(r.spec)}</td><td>{escape(r.summary)}</td>"
                    f"<td><code>{sha}</code></td></tr>")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            "<title>ptlab runs</title><style>body{font-family:system-ui,sans-serif;"
            "margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:.2em .5em;text-align:left}</style></head><body><h1>ptlab runs</h1>"
            f"<p>{len(runs)} run(s), newest first; each links its report.</p>"
            "<table><tr><th>started</th><th>run</th><th>spec</th><th>cells</th>"
            "<th>code</th></tr>" + "".join(body) + "</table></body></html>\n")


def write_index(root: Path) -> Path:
    """(Re)write `root`/index.html for the runs under it."""
    path = root / INDEX_HTML
    tmp = path.with_name(f".{INDEX_HTML}.tmp")
    tmp.write_text(index_html(find_runs(root)), encoding="utf-8")
    tmp.replace(path)
    return path
