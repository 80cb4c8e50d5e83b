"""A self-contained HTML report of one run (results.json -> report.html).

One file with its plots inlined as base64 PNG, so a report can be mailed,
attached to a CI run or archived without the directory it came from. It states
the RTT the run used and the provenance, since numbers without either cannot be
compared with anyone else's.

Usage: ``python -m ptlab.report RESULTS_DIR``
"""

from __future__ import annotations

import argparse
import base64
import io
import sys
from collections.abc import Sequence
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

# The Agg canvas directly, never pyplot: no global backend state, safe in any process.
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from ptlab.results import Results, Row, load_results

REPORT_HTML = "report.html"

STATUS_COLOURS = {"reachable": "#2e9d48", "blocked": "#d0342c", "ERROR": "#8c8c8c"}
# Which status a heat-map cell shows when a cell has several rows: the worst one.
_STATUS_RANK = {"reachable": 0, "blocked": 1, "ERROR": 2}

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.status { color: #fff; font-weight: bold; }
.status-reachable { background: #2e9d48; }
.status-blocked { background: #d0342c; }
.status-ERROR { background: #8c8c8c; }
.met-yes { color: #2e9d48; } .met-no { color: #d0342c; font-weight: bold; }
code { font-size: 0.9em; }
img { max-width: 100%; }
.rtt { font-size: 1.1em; }
"""


# --- formatting ------------------------------------------------------------------------------


def _num(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _with_ci(value: float | None, ci: tuple[float, float] | None, digits: int = 2) -> str:
    if value is None:
        return "—"
    if ci is None:
        return f"{value:.{digits}f}"
    lo, hi = ci
    return f"{value:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _pct(share: float | None) -> str:
    return "—" if share is None else f"{share * 100:.1f} %"


def _met(row: Row) -> tuple[str, str]:
    if row.expectation_met is None:
        return "—", ""
    if row.expectation_met:
        return f"✓ ({row.expectation})", "met-yes"
    return f"✗ (expected {row.expectation})", "met-no"


def _parse_time(s: str) -> datetime | None:
    try:
        return datetime.fromisoformat(s)
    except (TypeError, ValueError):
        return None


def _time_span(results: Results) -> str:
    span = f"{results.started} → {results.finished}"
    start, end = _parse_time(results.started), _parse_time(results.finished)
    if start is not None and end is not None:
        try:
            span += f" ({(end - start).total_seconds():.0f} s)"
        except TypeError:  # one naive, one aware
            pass
    return span


def rtt_statement(results: Results) -> str:
    """The sentence every report must carry: which RTT(s) the run used."""
    rtts = results.rtts_ms()
    if not rtts:
        return "RTT: not recorded in any result row."
    missing = sum(1 for r in results.rows if r.rtt_ms is None)
    text = "RTT: " + ", ".join(f"{x:g} ms" for x in rtts)
    if missing:
        text += f" ({missing} row(s) without a recorded RTT)"
    return text + "."


# --- plots -----------------------------------------------------------------------------------


def _png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _mpl(text: str) -> str:
    """Escape "$" so matplotlib never reads a name as mathtext."""
    return text.replace("$", r"\$")


def _cell_labels(rows: Sequence[Row]) -> list[str]:
    return [_mpl(f"{r.transport}\n{r.censor}") for r in rows]


def plot_goodput(rows: Sequence[Row]) -> str:
    """Bar per cell with 95 % CI error bars; blocked/ERROR cells are 0 and labelled."""
    fig = Figure(figsize=(max(6.0, 0.9 * len(rows) + 2), 4.5))
    ax = fig.add_subplot()
    heights, err_lo, err_hi, colours = [], [], [], []
    for r in rows:
        ok = r.status == "reachable" and r.goodput_mbps is not None
        h = r.goodput_mbps if ok else 0.0
        heights.append(h)
        if ok and r.goodput_ci95 is not None:
            lo, hi = r.goodput_ci95
            err_lo.append(max(0.0, h - lo))
            err_hi.append(max(0.0, hi - h))
        else:
            err_lo.append(0.0)
            err_hi.append(0.0)
        colours.append(STATUS_COLOURS[r.status])
    xs = list(range(len(rows)))
    ax.bar(xs, heights, color=colours, yerr=[err_lo, err_hi], capsize=4, ecolor="#333")
    top = max([h + e for h, e in zip(heights, err_hi, strict=True)] + [1.0])
    for x, r in zip(xs, rows, strict=True):
        if r.status != "reachable":
            ax.text(x, top * 0.02, r.status, ha="center", va="bottom", rotation=90, fontsize=9)
        elif r.goodput_mbps is None:
            ax.text(x, top * 0.02, "n/a", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(xs, _cell_labels(rows), fontsize=8)
    ax.set_ylim(0, top * 1.1)
    ax.set_ylabel("goodput (Mbit/s), 95 % CI")
    ax.set_title("Goodput per cell")
    return _png(fig)


def plot_status_heatmap(rows: Sequence[Row]) -> str:
    """Transports x censors grid of status, so the blocking pattern reads at a glance."""
    transports = list(dict.fromkeys(r.transport for r in rows))
    censors = list(dict.fromkeys(r.censor for r in rows))
    cells: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        cells.setdefault((r.transport, r.censor), []).append(r)
    # Codes: 0 reachable, 1 blocked, 2 ERROR, 3 no row.
    grid = [[3] * len(censors) for _ in transports]
    labels = [["no run"] * len(censors) for _ in transports]
    for (t, c), rs in cells.items():
        worst = max(rs, key=lambda r: _STATUS_RANK[r.status]).status
        i, j = transports.index(t), censors.index(c)
        grid[i][j] = _STATUS_RANK[worst]
        labels[i][j] = worst if len(rs) == 1 else f"{worst}\n({len(rs)} rows)"
    cmap = ListedColormap(
        [STATUS_COLOURS["reachable"], STATUS_COLOURS["blocked"], STATUS_COLOURS["ERROR"], "#fff"]
    )
    fig = Figure(figsize=(max(4.0, 1.6 * len(censors) + 2), max(2.5, 0.7 * len(transports) + 1.5)))
    ax = fig.add_subplot()
    ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=3.5, aspect="auto")
    for i in range(len(transports)):
        for j in range(len(censors)):
            colour = "#000" if grid[i][j] == 3 else "#fff"
            ax.text(j, i, labels[i][j], ha="center", va="center", color=colour, fontsize=9)
    ax.set_xticks(range(len(censors)), [_mpl(c) for c in censors])
    ax.set_yticks(range(len(transports)), [_mpl(t) for t in transports])
    ax.set_xlabel("censor")
    ax.set_ylabel("transport")
    ax.set_title("Status per cell")
    return _png(fig)


def plot_latency(rows: Sequence[Row]) -> str | None:
    """Box plot of latency samples per cell; None when no cell has samples."""
    with_samples = [r for r in rows if r.latency_samples]
    if not with_samples:
        return None
    fig = Figure(figsize=(max(6.0, 0.9 * len(with_samples) + 2), 4.5))
    ax = fig.add_subplot()
    ax.boxplot([r.latency_samples for r in with_samples])
    ax.set_xticks(range(1, len(with_samples) + 1), _cell_labels(with_samples), fontsize=8)
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency per cell")
    return _png(fig)


# --- HTML ------------------------------------------------------------------------------------


def _kv_rows(items: dict[str, Any]) -> str:
    return "".join(
        f"<tr><th>{escape(str(k))}</th><td><code>{escape(str(v))}</code></td></tr>"
        for k, v in items.items()
    )


def _provenance_html(prov: dict[str, Any]) -> str:
    dirty = prov.get("git_dirty")
    sha = str(prov.get("git_sha", "unknown"))
    if dirty:
        sha += " (dirty working tree)"
    basics = {
        "git SHA": sha,
        "kernel": prov.get("kernel", "unknown"),
        "python": prov.get("python", "unknown"),
        "hostname": prov.get("hostname", "unknown"),
    }
    parts = [f"<table>{_kv_rows(basics)}</table>"]
    for title, key in (
        ("Transports", "transports"),
        ("Peer binaries", "peers"),
        ("Python dependencies", "python_deps"),
        ("Seeds", "seeds"),
        ("Profile hashes (SHA-256)", "profiles"),
    ):
        section = prov.get(key) or {}
        body = _kv_rows(section) if section else "<tr><td>none recorded</td></tr>"
        parts.append(f"<h3>{escape(title)}</h3><table>{body}</table>")
    return "\n".join(parts)


def _results_table_html(rows: Sequence[Row]) -> str:
    head = (
        "<tr><th>transport</th><th>censor</th><th>status</th><th>goodput Mbit/s [95 % CI]</th>"
        "<th>latency ms (median) [95 % CI]</th><th>RTT ms</th><th>collateral</th>"
        "<th>detector → action</th><th>expectation</th><th>detail</th></tr>"
    )
    body = []
    for r in rows:
        det = " → ".join(x for x in (r.detector, r.action) if x) or "—"
        if r.time_to_detection_s is not None:
            det += f" at {r.time_to_detection_s:.2f} s"
        if sum(r.detections.values()) > 1:
            det += " (" + ", ".join(f"{k} ×{v}" for k, v in sorted(r.detections.items())) + ")"
        if r.probes_sent:
            det += f"; {r.probes_sent} probes: " + ", ".join(
                f"{k} ×{v}" for k, v in sorted(r.probe_verdicts.items()))
        met, met_cls = _met(r)
        detail = "; ".join(([r.error] if r.error else []) + r.notes)
        body.append(
            "<tr>"
            f"<td>{escape(r.transport)}</td><td>{escape(r.censor)}</td>"
            f'<td class="status status-{escape(r.status)}">{escape(r.status)}</td>'
            f'<td class="num">{escape(_with_ci(r.goodput_mbps, r.goodput_ci95))}</td>'
            f'<td class="num">{escape(_with_ci(r.latency_ms, r.latency_ci95, 1))}</td>'
            f'<td class="num">{escape(_num(r.rtt_ms, 1))}</td>'
            f'<td class="num">{escape(_pct(r.collateral))}</td>'
            f"<td>{escape(det)}</td>"
            f'<td class="{met_cls}">{escape(met)}</td>'
            f"<td>{escape(detail)}</td>"
            "</tr>"
        )
    return f"<table>{head}{''.join(body)}</table>"


def _img(b64: str, alt: str) -> str:
    return f'<img src="data:image/png;base64,{b64}" alt="{escape(alt)}">'


def render_html(results: Results) -> str:
    """The whole report as one HTML string."""
    rows = results.rows
    title = f"ptlab report — {Path(results.spec_path).name or results.spec_path}"
    sections = [
        f"<h1>{escape(title)}</h1>",
        f"<p>Spec: <code>{escape(results.spec_path)}</code></p>",
        f"<p>Run: {escape(_time_span(results))}</p>",
        f'<p class="rtt"><strong>{escape(rtt_statement(results))}</strong></p>',
        "<h2>Results</h2>",
    ]
    if rows:
        sections.append(_results_table_html(rows))
        sections.append("<h2>Goodput</h2>" + _img(plot_goodput(rows), "goodput per cell"))
        sections.append("<h2>Status</h2>" + _img(plot_status_heatmap(rows), "status heat-map"))
        latency = plot_latency(rows)
        if latency is not None:
            sections.append("<h2>Latency</h2>" + _img(latency, "latency per cell"))
    else:
        sections.append("<p>This run has no result rows.</p>")
    sections.append("<h2>Provenance</h2>" + _provenance_html(results.provenance))
    sections.append(f"<p>Schema version {results.schema_version}.</p>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )


def render_report(directory: Path | str) -> Path:
    """Read directory/results.json and write directory/report.html; returns its path."""
    directory = Path(directory)
    out = directory / REPORT_HTML
    out.write_text(render_html(load_results(directory)), encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: render the report for one results directory."""
    parser = argparse.ArgumentParser(
        prog="python -m ptlab.report", description="Render report.html from results.json."
    )
    parser.add_argument("results_dir", type=Path, help="directory holding results.json")
    args = parser.parse_args(argv)
    try:
        path = render_report(args.results_dir)
    except (OSError, ValueError) as exc:
        print(f"ptlab.report: error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
