"""``ptlab compare RUN_A RUN_B …``: what changed between runs, cell by cell.

A regression hunt or a paper's "before and after" starts here: which cells
changed status, by how much goodput moved (as a ratio with its interval, since
goodput is compared on a log scale), and what else differed between the runs:
the spec, the code (git SHA), the kernel, the peers' versions, the profiles.
Each later run is compared with the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from ..common.results import Results, Row, load_results
from ..common.specfile import flatten_keys
from ..common.stats import log_ratio_ci95
from . import cellfmt

Cell = tuple[str, str]


@dataclass
class CellChange:
    cell: Cell
    a: Row
    b: Row

    @property
    def status_changed(self) -> bool:
        return self.a.status != self.b.status

    def goodput_ratio(self) -> tuple[float, tuple[float, float] | None] | None:
        """B's goodput over A's (geometric means), with a Welch 95 % interval on the
        log scale when both have two or more repetitions."""
        xa, xb = self.a.goodput_samples, self.b.goodput_samples
        if not xa or not xb or min(xa + xb) <= 0:
            return None
        return log_ratio_ci95(xb, xa)


@dataclass
class Comparison:
    a_dir: str
    b_dir: str
    changes: list[CellChange] = field(default_factory=list)
    only_a: list[Cell] = field(default_factory=list)
    only_b: list[Cell] = field(default_factory=list)
    # Effective settings (defaults and --quick included) where both runs recorded
    # them; the spec's own text otherwise.
    setting_diffs: list[tuple[str, Any, Any]] = field(default_factory=list)
    settings_recorded: bool = True
    spec_diffs: list[tuple[str, Any, Any]] = field(default_factory=list)
    provenance_diffs: list[tuple[str, Any, Any]] = field(default_factory=list)

    @property
    def status_changes(self) -> list[CellChange]:
        return [c for c in self.changes if c.status_changed]

    @property
    def workload_diffs(self) -> list[tuple[str, Any, Any]]:
        """Settings that change what a cell measures: goodput and latency of two runs
        that differ here do not compare."""
        return [d for d in self.setting_diffs if d[0].startswith(("workloads.", "run."))]


def _diffs(a: dict[str, Any], b: dict[str, Any], skip: tuple[str, ...] = ()
           ) -> list[tuple[str, Any, Any]]:
    fa, fb = flatten_keys(a), flatten_keys(b)
    return [(k, fa.get(k), fb.get(k)) for k in sorted(fa.keys() | fb.keys())
            if fa.get(k) != fb.get(k) and not k.startswith(skip)]


#: Provenance keys that differ between any two runs and say nothing about them.
_VOLATILE = ("hostname", "started", "lab_id", "seeds.run")
#: Spec sections whose every value is a setting (compared as effective settings).
_SETTING_SECTIONS = ("experiment", "topology", "workloads")


def compare(a: Results, b: Results, a_dir: str = "A", b_dir: str = "B") -> Comparison:
    cells_a = {(r.transport, r.censor): r for r in a.rows}
    cells_b = {(r.transport, r.censor): r for r in b.rows}
    out = Comparison(a_dir, b_dir)
    for cell, row in cells_a.items():
        if cell in cells_b:
            out.changes.append(CellChange(cell, row, cells_b[cell]))
        else:
            out.only_a.append(cell)
    out.only_b = [c for c in cells_b if c not in cells_a]
    if a.settings and b.settings:
        out.setting_diffs = _diffs(a.settings, b.settings)
        # The rest of the spec (rows, columns, expectations, tools) as written.
        out.spec_diffs = [d for d in _diffs(a.spec, b.spec)
                          if not d[0].startswith(_SETTING_SECTIONS)
                          or d[0] in ("experiment.name", "experiment.description")]
    else:
        out.settings_recorded = False
        out.spec_diffs = _diffs(a.spec, b.spec)
    out.provenance_diffs = _diffs(a.provenance, b.provenance, _VOLATILE)
    return out


def _value(v: Any) -> str:
    """A setting's value as people write it (2,000,000; true; "absent")."""
    if v is None:
        return "absent"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v:,}"
    return repr(v)


def workload_warning(cmp: Comparison) -> str | None:
    """One line when the runs measured differently, or None."""
    diffs = cmp.workload_diffs
    if not diffs:
        return None
    what = "; ".join(f"{k} {_value(a)} -> {_value(b)}" for k, a, b in diffs)
    return f"warning: the runs' workloads differ ({what}): their goodput and latency do not compare"


def _ratio_text(change: CellChange) -> str:
    r = change.goodput_ratio()
    if r is None:
        return "—"
    ratio, ci = r
    return f"×{ratio:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def text_report(cmp: Comparison) -> str:
    lines = [f"compare {cmp.a_dir} -> {cmp.b_dir}"]
    if (warning := workload_warning(cmp)) is not None:
        lines.append(warning)
    lines.append(f"{len(cmp.changes)} cells in both; {len(cmp.status_changes)} changed status")
    width = max([len(f"{t} × {c}") for t, c in (x.cell for x in cmp.changes)] + [4])
    for ch in cmp.changes:
        mark = "!" if ch.status_changed else " "
        lines.append(f"{mark} {ch.cell[0] + ' × ' + ch.cell[1]:<{width}}  "
                     f"{cellfmt.status(ch.a):<16} -> {cellfmt.status(ch.b):<16} "
                     f"goodput {_ratio_text(ch)}")
    for title, cells in (("only in A", cmp.only_a), ("only in B", cmp.only_b)):
        for t, c in cells:
            lines.append(f"  {t} × {c}: {title}")
    if cmp.settings_recorded:
        sections = [("settings", cmp.setting_diffs), ("spec", cmp.spec_diffs)]
    else:
        lines.append("settings: not recorded by both runs (results before schema 4); "
                     "the specs as written:")
        sections = [("spec", cmp.spec_diffs)]
    for title, diffs in (*sections, ("provenance", cmp.provenance_diffs)):
        lines.append(f"{title}: " + ("no differences" if not diffs else f"{len(diffs)} differ"))
        for k, va, vb in diffs:
            lines.append(f"  {k}: {_value(va)} -> {_value(vb)}")
    return "\n".join(lines) + "\n"


def html_report(cmp: Comparison) -> str:
    rows = []
    for ch in cmp.changes:
        cls = ' class="changed"' if ch.status_changed else ""
        rows.append(f"<tr{cls}><td>{escape(ch.cell[0])}</td><td>{escape(ch.cell[1])}</td>"
                    f"<td>{escape(cellfmt.status(ch.a))}</td>"
                    f"<td>{escape(cellfmt.status(ch.b))}</td>"
                    f"<td>{escape(cellfmt.goodput(ch.a))}</td>"
                    f"<td>{escape(cellfmt.goodput(ch.b))}</td>"
                    f"<td>{escape(_ratio_text(ch))}</td></tr>")

    def diff_table(diffs: list[tuple[str, Any, Any]]) -> str:
        if not diffs:
            return "<p>No differences.</p>"
        body = "".join(f"<tr><td><code>{escape(k)}</code></td><td>{escape(_value(a))}</td>"
                       f"<td>{escape(_value(b))}</td></tr>" for k, a, b in diffs)
        return f"<table><tr><th>key</th><th>A</th><th>B</th></tr>{body}</table>"

    only = "".join(f"<li>{escape(t)} × {escape(c)}: only in {w}</li>"
                   for w, cells in (("A", cmp.only_a), ("B", cmp.only_b)) for t, c in cells)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>ptlab compare</title><style>body{font-family:system-ui,sans-serif;margin:2em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}"
        "tr.changed{background:#fde8c8}</style></head><body>"
        f"<h1>ptlab compare</h1><p>A: <code>{escape(cmp.a_dir)}</code><br>"
        f"B: <code>{escape(cmp.b_dir)}</code></p>"
        f"<p>{len(cmp.changes)} cells in both; <strong>{len(cmp.status_changes)} changed "
        "status</strong>. Goodput ratio is B/A of the geometric means, with a Welch 95 % "
        "interval on the log scale.</p>"
        "<table><tr><th>transport</th><th>censor</th><th>status A</th><th>status B</th>"
        "<th>goodput A Mbit/s</th><th>goodput B Mbit/s</th><th>B/A</th></tr>"
        + "".join(rows) + "</table>"
        + (f"<ul>{only}</ul>" if only else "")
        + (f'<p class="warn"><strong>{escape(w)}</strong></p>'
           if (w := workload_warning(cmp)) else "")
        + "<h2>Settings</h2>" + (diff_table(cmp.setting_diffs) if cmp.settings_recorded
                                 else "<p>Not recorded by both runs.</p>")
        + "<h2>Spec</h2>" + diff_table(cmp.spec_diffs)
        + "<h2>Provenance</h2>" + diff_table(cmp.provenance_diffs)
        + "</body></html>\n")


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """A comparison for scripts: cells with both statuses and the goodput ratio, and
    the settings, spec and provenance that differ."""
    def cell(ch: CellChange) -> dict[str, Any]:
        r = ch.goodput_ratio()
        return {"transport": ch.cell[0], "censor": ch.cell[1], "status_a": ch.a.status,
                "status_b": ch.b.status, "status_changed": ch.status_changed,
                "goodput_ratio": None if r is None else r[0],
                "goodput_ratio_ci95": None if r is None or r[1] is None else list(r[1])}

    def diffs(ds: list[tuple[str, Any, Any]]) -> list[dict[str, Any]]:
        return [{"key": k, "a": a, "b": b} for k, a, b in ds]

    return {"a": cmp.a_dir, "b": cmp.b_dir, "cells": [cell(c) for c in cmp.changes],
            "only_a": [list(c) for c in cmp.only_a], "only_b": [list(c) for c in cmp.only_b],
            "workload_warning": workload_warning(cmp),
            "settings_recorded": cmp.settings_recorded,
            "setting_diffs": diffs(cmp.setting_diffs), "spec_diffs": diffs(cmp.spec_diffs),
            "provenance_diffs": diffs(cmp.provenance_diffs)}


def run(dirs: list[Path], html: Path | None = None) -> tuple[str, list[Comparison]]:
    """Compare every later run with the first; the text, and the comparisons."""
    first = load_results(dirs[0])
    comparisons = [compare(first, load_results(d), str(dirs[0]), str(d)) for d in dirs[1:]]
    if html is not None:
        html.write_text("\n".join(html_report(c) for c in comparisons), encoding="utf-8")
    return "".join(text_report(c) for c in comparisons), comparisons
