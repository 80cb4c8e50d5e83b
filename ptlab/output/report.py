"""A self-contained HTML report of one run (results.json -> report.html).

One file with its figures inlined (SVG), so a report can be mailed, attached to
a CI run or archived; the figures are also written to ``figures/`` as SVG,
PDF and PNG for papers. The report puts the numbers in context: what the experiment
was, the RTT and whether the link was shaped, every censor override beside the
value the profile's source gives, and per cell a drill-down (its repetitions,
a timeline of what the censor did to the transport's flow, the log lines that
matter, links to the cell's pcaps and logs). Statistics follow
docs/lab/results.md: k of n with Wilson intervals, goodput on the log scale,
the median's own interval for latency, n everywhere.

Usage: ``python -m ptlab.output.report RESULTS_DIR``
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing
import os
import re
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ..common.results import Results, Row, load_results
from . import cellfmt, figures

REPORT_HTML = "report.html"
FIGURES_DIR = "figures"
#: Each figure is written in these formats: SVG and PDF for papers, PNG to glance at.
FIGURE_FORMATS = ("svg", "pdf", "png")
#: Up to this many cells the report is one self-contained page. Above it (a
#: full.toml run has 966), it is an overview that loads at once: a status
#: heatmap, the results table, figures as images beside the page (one per group
#: of censor columns), and each cell's drill-down on a page of its own under
#: CELL_PAGES, opened from the table.
INLINE_CELLS = 60
CELL_PAGES = "report-cells"
#: Censor columns per goodput and latency figure in a large run: each stays as
#: readable as a small run's.
CENSORS_PER_FIGURE = 6

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.status { color: #fff; font-weight: bold; }
.status-reachable { background: #0072B2; }
.status-blocked { background: #D55E00; }
.status-ERROR { background: #999999; }
.status-skipped { background: #E6E6E6; color: #000; }
.met-yes { color: #0072B2; } .met-no { color: #D55E00; font-weight: bold; }
.warn { background: #fff4d6; border-left: 4px solid #E69F00; padding: 0.5em 1em; }
code, pre { font-size: 0.85em; }
pre { background: #f6f6f6; padding: 0.5em; overflow-x: auto; }
figure { margin: 1em 0; } svg { max-width: 100%; height: auto; }
section.cell { border-top: 1px solid #ccc; margin-top: 1.5em; }
ol.timeline li { font-family: ui-monospace, monospace; font-size: 0.85em; }
ol.timeline pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 0.2em 0; }
ol.timeline summary { cursor: pointer; }
.role-transport { font-weight: bold; }
table.heatmap td { padding: 0.1em 0.3em; font-size: 0.75em; text-align: center; }
table.heatmap td a { color: inherit; text-decoration: none; }
table.heatmap th.vert { height: 9em; white-space: nowrap; vertical-align: bottom; }
table.heatmap th.vert span { writing-mode: vertical-rl; transform: rotate(180deg); }
"""

#: Log lines worth showing in a cell's drill-down (not JSON events, which the
#: timeline shows): failures, tor's bootstrap progress, handshake outcomes.
NOTABLE = re.compile(r"error|fail|warn|refused|reset|timed? ?out|Bootstrapped|denied|"
                     r"unreachable|closed", re.I)
MAX_LOG_LINES = 8
MAX_TIMELINE = 40
#: An event's fields up to this long are shown on its line; longer, folded.
INLINE_EVENT_CHARS = 160


def anchor(row: Row) -> str:
    return "cell-" + re.sub(r"[^A-Za-z0-9_-]+", "-", f"{row.transport}--{row.censor}")


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


# --- context ----------------------------------------------------------------------------


def _kv_rows(items: dict[str, Any]) -> str:
    return "".join(f"<tr><th>{escape(str(k))}</th><td><code>{escape(str(v))}</code></td></tr>"
                   for k, v in items.items())


def _captures_text(capture: Any) -> str:
    """What the cell pcaps keep of each packet (docs/lab/results.md §8)."""
    if not isinstance(capture, dict):
        return "not recorded (runs before the snap length was recorded kept 256 bytes)"
    snaplen = capture.get("snaplen")
    if snaplen is None:
        return "none taken"
    if capture.get("whole_packets"):
        return f"whole packets (snap length {snaplen} bytes)"
    return f"the first {snaplen} bytes of each packet (payloads cut)"


def _context_html(results: Results) -> str:
    spec = results.spec or {}
    exp, topo, wl = (spec.get(k, {}) for k in ("experiment", "topology", "workloads"))
    reps = max((r.repetitions for r in results.rows), default=0)
    parts = []
    if exp.get("description"):
        parts.append(f"<p>{escape(str(exp['description']))}</p>")
    def setting(key: str, written: Any, unit: str = "") -> str:
        """The effective value, its unit, and where it came from when not the spec;
        older runs recorded only what the spec wrote."""
        if key not in results.settings:
            return "default" if written is None else f"{written}{unit}"
        value, origin = results.settings[key], results.setting_origins.get(key, "")
        text = (f"{value:,}" if isinstance(value, int) and not isinstance(value, bool)
                else str(value))
        return text + unit + (f" ({origin})" if origin and origin != "spec" else "")

    facts = {
        "repetitions per cell": reps or exp.get("repetitions", "?"),
        "seed": exp.get("seed", "?"),
        "bulk download": setting("workloads.bulk.size", wl.get("bulk", {}).get("size"),
                                 " bytes per repetition"),
        "latency samples": setting("workloads.latency.count",
                                   wl.get("latency", {}).get("count")),
        "benign mix": "on" if wl.get("benign", {}).get("enabled", True) else "off",
        "link": ((f"{topo['rate_mbit']} Mbit/s" if topo.get("rate_mbit") else "unshaped rate")
                 + f", {topo.get('loss_pct', 0)} % loss, {topo.get('delay_ms', 0)} ms "
                 "added delay"),
        "machines": results.provenance.get("machines", "this machine's namespaces"),
        "captures": _captures_text(results.provenance.get("capture")),
    }
    parts.append(f"<table>{_kv_rows(facts)}</table>")
    parts.append(_settings_html(results))
    labs = results.settings.get("run.labs_at_once", 1)
    if isinstance(labs, int) and labs > 1:
        parts.append(f'<p class="warn">{labs} labs measured at once on one machine: '
                     "goodput and latency were measured under contention for its CPUs. "
                     "Statuses, detections and collateral are a serial run's; compare "
                     "speeds with a serial run's only.</p>")
    if not topo.get("rate_mbit"):
        parts.append('<p class="warn">The link is unshaped: goodput measures how fast this '
                     "machine's CPU moves bytes through each transport, not a network. "
                     "Compare transports with each other within this run, not with "
                     "another machine's numbers.</p>")
    if 0 < reps < 3:
        parts.append(f'<p class="warn">{reps} repetition(s) per cell: intervals are wide or '
                     "absent; the figures show the repetitions themselves.</p>")
    return "\n".join(parts)


def _settings_html(results: Results) -> str:
    """Every setting the run used, with its value and where it came from (the spec,
    a default, or a command-line option such as --quick)."""
    if not results.settings:
        return "<p>This run did not record its effective settings (results before schema 4).</p>"
    body = "".join(
        f"<tr><th><code>{escape(k)}</code></th><td><code>{escape(json.dumps(v))}</code></td>"
        f"<td>{escape(results.setting_origins.get(k, '?'))}</td></tr>"
        for k, v in results.settings.items())
    return ("<details><summary>Every setting this run used</summary><table>"
            "<tr><th>setting</th><th>value</th><th>from</th></tr>"
            f"{body}</table></details>")


def _censors_html(results: Results) -> str:
    columns = results.provenance.get("censors") or {}
    if not columns:
        return "<p>This run did not record its censor columns.</p>"
    out = ["<table><tr><th>column</th><th>profile</th><th>source</th>"
           "<th>override</th><th>value here</th><th>source's value</th>"
           "<th>effective profile SHA-256</th></tr>"]
    for column, info in columns.items():
        overrides = info.get("overrides") or [None]
        for i, o in enumerate(overrides):
            head = (f'<td rowspan="{len(overrides)}">{escape(column)}</td>'
                    f'<td rowspan="{len(overrides)}"><code>{escape(info["profile"])}</code></td>'
                    f'<td rowspan="{len(overrides)}">{escape(info.get("source", ""))}</td>'
                    if i == 0 else "")
            tail = (f'<td rowspan="{len(overrides)}"><code>'
                    f'{escape(info.get("effective_sha256", "")[:16])}…</code></td>'
                    if i == 0 else "")
            if o is None:
                out.append(f'<tr>{head}<td colspan="3">no overrides: the profile as its '
                           f"source gives it</td>{tail}</tr>")
                continue
            out.append(f"<tr>{head}<td><code>{escape(o['key'])}</code></td>"
                       f"<td><code>{escape(json.dumps(o['value']))}</code></td>"
                       f"<td><code>{escape(json.dumps(o['source_value']))}</code></td>{tail}</tr>")
    out.append("</table>")
    return "".join(out)


def _provenance_html(prov: dict[str, Any]) -> str:
    sha = str(prov.get("git_sha", "unknown")) + (" (dirty working tree)"
                                                 if prov.get("git_dirty") else "")
    basics = {"git SHA": sha, "kernel": prov.get("kernel", "unknown"),
              "python": prov.get("python", "unknown"), "hostname": prov.get("hostname",
                                                                            "unknown")}
    parts = [f"<table>{_kv_rows(basics)}</table>"]
    for title, key in (("Transports", "transports"), ("Peer binaries", "peers"),
                       ("Python dependencies", "python_deps"), ("Seeds", "seeds"),
                       ("Profile files (SHA-256)", "profiles")):
        section = prov.get(key) or {}
        body = _kv_rows(section) if section else "<tr><td>none recorded</td></tr>"
        parts.append(f"<h3>{escape(title)}</h3><table>{body}</table>")
    # Tools the rows name as {tool.NAME}: which build ran (ptlab/common/tools.py).
    for name, build in sorted((prov.get("tools") or {}).items()):
        parts.append(f"<h3>Tool {escape(name)}</h3><table>{_kv_rows(build)}</table>")
    return "\n".join(parts)


# --- tables -----------------------------------------------------------------------------


def _met(row: Row) -> tuple[str, str]:
    if row.expectation_met is None:
        return "—", ""
    if row.expectation_met:
        return f"✓ ({row.expectation})", "met-yes"
    return f"✗ (expected {row.expectation})", "met-no"


def _results_table_html(rows: Sequence[Row], pages: bool = False) -> str:
    head = ("<tr><th>cell</th><th>status k/n [95 % Wilson]</th>"
            "<th>goodput Mbit/s geo. mean [95 % CI] n</th>"
            "<th>latency ms median [CI] n</th><th>RTT ms</th><th>collateral</th>"
            "<th>transport detection</th><th>expectation</th></tr>")
    body = []
    for r in rows:
        met, met_cls = _met(r)
        body.append(
            f'<tr><td><a href="{f"{CELL_PAGES}/{anchor(r)}.html" if pages else "#" + anchor(r)}">'
            f"{escape(r.transport)} × {escape(r.censor)}</a></td>"
            f'<td class="status status-{escape(r.status)}">{escape(cellfmt.status(r))} '
            f"{escape(cellfmt.reachability_interval(r))}</td>"
            f'<td class="num">{escape(cellfmt.goodput(r))}</td>'
            f'<td class="num">{escape(cellfmt.latency(r))}</td>'
            f'<td class="num">{"—" if r.rtt_ms is None else f"{r.rtt_ms:.1f}"}</td>'
            f"<td>{escape(cellfmt.collateral(r))}</td>"
            f"<td>{escape(cellfmt.detection(r))}</td>"
            f'<td class="{met_cls}">{escape(met)}</td></tr>')
    return f"<table>{head}{''.join(body)}</table>"


def _collateral_html(rows: Sequence[Row]) -> str:
    """Benign class × censor: flows blocked / run, summed over the transports."""
    censors = list(dict.fromkeys(r.censor for r in rows))
    classes = sorted({k for r in rows for k in r.benign_detail})
    if not classes:
        return "<p>No benign flows ran.</p>"
    cells: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        for k, d in r.benign_detail.items():
            c = cells.setdefault((k, r.censor), [0, 0])
            c[0] += d.get("blocked", 0)
            c[1] += d.get("blocked", 0) + d.get("ok", 0)
    head = "<tr><th>benign class</th>" + "".join(f"<th>{escape(c)}</th>" for c in censors)
    body = []
    for k in classes:
        tds = []
        for column in censors:
            b, n = cells.get((k, column), (0, 0))
            style = ' class="met-no"' if b else ""
            tds.append(f'<td class="num"{"" if not b else style}>{b}/{n}</td>' if n
                       else "<td>—</td>")
        body.append(f"<tr><th>{escape(k)}</th>{''.join(tds)}</tr>")
    return f"<table>{head}</tr>{''.join(body)}</table>"


# --- per-cell drill-down -----------------------------------------------------------------


def _events_by_cell(directory: Path | None) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    path = directory / "events.jsonl" if directory else None
    if path is None or not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict):
            out.setdefault(str(e.get("cell")), []).append(e)
    return out


_TIMELINE_EVENTS = {"detection", "probe_request", "probe_verdict", "probe_failed", "counters",
                    "bulk", "cell_start", "cell_end", "block_server", "ready",
                    "tor_bootstrap", "tor_warn", "tor_err"}


def _event_fields_html(fields: dict[str, Any]) -> str:
    """An event's fields, whole: inline when short; when long, folded in a
    <details> whose summary is its first whole fields (never a field cut in two)
    and whose body is every field, indented and wrapped."""
    compact = json.dumps(fields, default=str, ensure_ascii=False)
    if len(compact) <= INLINE_EVENT_CHARS:
        return f"<code>{escape(compact)}</code>"
    shown: list[str] = []
    for key, value in fields.items():
        piece = f"{json.dumps(key)}: {json.dumps(value, default=str, ensure_ascii=False)}"
        if len(", ".join([*shown, piece])) > INLINE_EVENT_CHARS:
            break
        shown.append(piece)
    head = "{" + "".join(f"{p}, " for p in shown) + "…}"
    pretty = json.dumps(fields, default=str, ensure_ascii=False, indent=1)
    return (f"<details><summary><code>{escape(head)}</code> ({len(fields)} fields, "
            f"{len(compact)} characters)</summary><pre>{escape(pretty)}</pre></details>")


def _timeline_html(events: list[dict[str, Any]]) -> str:
    """The transport's story in the cell: the runner's markers, each repetition,
    the censor's detections (transport flows first), probes and counters."""
    keep = [e for e in events if e.get("event") in _TIMELINE_EVENTS
            and (e.get("event") != "ready" or e.get("component") == "censor")
            and e.get("role") in (None, "transport", "probe")]
    if not keep:
        return "<p>No events recorded for this cell.</p>"
    t0 = float(keep[0].get("ts", 0))
    items = []
    for e in keep[:MAX_TIMELINE]:
        what = {k: v for k, v in e.items()
                if k not in ("ts", "component", "event", "cell", "flow", "evidence", "counters")}
        cls = ' class="role-transport"' if e.get("role") == "transport" else ""
        items.append(f"<li{cls}>+{float(e.get('ts', t0)) - t0:7.3f} s "
                     f"{escape(str(e.get('component')))}: <b>{escape(str(e.get('event')))}</b> "
                     f"{_event_fields_html(what)}</li>")
    more = (f"<p>… {len(keep) - MAX_TIMELINE} more in events.jsonl.</p>"
            if len(keep) > MAX_TIMELINE else "")
    return f'<ol class="timeline">{"".join(items)}</ol>{more}'


def _logs_html(directory: Path | None, row: Row, link_prefix: str = "") -> str:
    if directory is None or not row.cell_dir:
        return ""
    cell = directory / row.cell_dir
    if not cell.is_dir():
        return f"<p>Cell files: <code>{escape(row.cell_dir)}</code> (not present here).</p>"
    links, notable = [], []
    for f in sorted(cell.iterdir()):
        if not f.is_file():
            continue
        rel = f.relative_to(directory).as_posix()
        links.append(f'<a href="{escape(link_prefix + rel)}">{escape(f.name)}</a>')
        if f.suffix == ".log":
            lines = [x for x in f.read_text(errors="replace").splitlines()
                     if not x.lstrip().startswith("{") and NOTABLE.search(x)]
            notable += [f"{f.name}: {x[:240]}" for x in lines[-MAX_LOG_LINES:]]
    html = f"<p>Files: {' · '.join(links) or 'none'}</p>"
    if notable:
        html += ("<details><summary>Log lines that matter</summary><pre>"
                 + escape("\n".join(notable)) + "</pre></details>")
    return html


def _repetitions_html(row: Row) -> str:
    if not row.repetition_outcomes:
        return f"<p>No repetition ran{': ' + escape(row.error) if row.error else ''}.</p>"
    body = "".join(
        f"<tr><td>{o.get('repetition')}</td><td>{'✓' if o.get('ok') else '✗'}</td>"
        f"<td class=\"num\">{'—' if o.get('goodput_mbit_s') is None else round(o['goodput_mbit_s'], 3)}</td>"  # noqa: E501
        f"<td class=\"num\">{o.get('seconds')}</td><td class=\"num\">{o.get('bytes')}</td>"
        f"<td>{escape(str(o.get('error') or ''))}</td></tr>" for o in row.repetition_outcomes)
    return ("<table><tr><th>#</th><th>ok</th><th>Mbit/s</th><th>s</th><th>bytes</th>"
            f"<th>error</th></tr>{body}</table>")


def _cell_html(row: Row, events: list[dict[str, Any]], directory: Path | None,
               link_prefix: str = "") -> str:
    """A cell's drill-down; `link_prefix` leads from where the page is to the
    results directory (a large run's cell pages sit one level down)."""
    pcaps = " · ".join(f'<a href="{escape(link_prefix + p)}">{escape(Path(p).name)}</a>'
                       for p in row.pcaps)
    notes = "".join(f"<li>{escape(n)}</li>" for n in row.notes)
    return (f'<section class="cell" id="{anchor(row)}">'
            f"<h3>{escape(row.transport)} × {escape(row.censor)}</h3>"
            f"<p><strong>{escape(cellfmt.summary(row))}</strong></p>"
            + (f"<ul>{notes}</ul>" if notes else "")
            + "<h4>Repetitions</h4>" + _repetitions_html(row)
            + "<h4>Timeline</h4>" + _timeline_html(events)
            + "<h4>Captures and logs</h4>"
            + (f"<p>pcaps: {pcaps}</p>" if pcaps else "<p>No captures.</p>")
            + _logs_html(directory, row, link_prefix)
            + "</section>")


# --- the page ---------------------------------------------------------------------------


def _figure(name: str, fig: Figure, alt: str, directory: Path | None) -> str:
    """The figure inlined as SVG, and written to figures/ as SVG, PDF and PNG
    (linked from its caption); with no directory, inlined as a PNG."""
    out = figures.render(fig)
    if directory is not None:
        fig_dir = directory / FIGURES_DIR
        fig_dir.mkdir(exist_ok=True)
        (fig_dir / f"{name}.svg").write_text(out.svg, encoding="utf-8")
        (fig_dir / f"{name}.pdf").write_bytes(out.pdf)
        (fig_dir / f"{name}.png").write_bytes(out.png)
        links = ", ".join(f'<a href="{FIGURES_DIR}/{name}.{ext}">{ext.upper()}</a>'
                          for ext in FIGURE_FORMATS)
        return (f'<figure id="fig-{name}">{out.svg[out.svg.index("<svg"):]}'
                f"<figcaption>{escape(alt)} ({links})</figcaption></figure>")
    b64 = base64.b64encode(out.png).decode("ascii")
    return (f'<figure id="fig-{name}"><img src="data:image/png;base64,{b64}" '
            f'alt="{escape(alt)}"></figure>')


def _image(name: str, alt: str) -> str:
    """A figure written beside the report, shown as its PNG, loaded when scrolled to."""
    links = ", ".join(f'<a href="{FIGURES_DIR}/{name}.{ext}">{ext.upper()}</a>'
                      for ext in FIGURE_FORMATS)
    return (f'<figure id="fig-{name}"><img loading="lazy" src="{FIGURES_DIR}/{name}.png" '
            f'alt="{escape(alt)}" style="max-width:100%"><figcaption>{escape(alt)} '
            f"({links})</figcaption></figure>")


_FIGURES: dict[str, Callable[[Sequence[Row]], Figure | None]] = {
    "status": figures.status_grid, "goodput": figures.goodput_facets,
    "goodput-relative": figures.relative_goodput, "latency": figures.latency_points}


def _write_figure(directory: Path, name: str, kind: str, rows: Sequence[Row]) -> bool:
    """Draw figure `kind` of `rows` and write it as figures/NAME.{svg,pdf,png};
    False when the rows give it nothing to draw."""
    fig = _FIGURES[kind](rows)
    if fig is None:
        return False
    out = figures.render(fig)
    fig_dir = directory / FIGURES_DIR
    fig_dir.mkdir(exist_ok=True)
    (fig_dir / f"{name}.svg").write_text(out.svg, encoding="utf-8")
    (fig_dir / f"{name}.pdf").write_bytes(out.pdf)
    (fig_dir / f"{name}.png").write_bytes(out.png)
    return True


def _large_figures_html(rows: Sequence[Row], directory: Path) -> str:
    """A large run's figures: the status grid, then goodput, goodput relative to no
    censor, and latency per group of CENSORS_PER_FIGURE columns; drawn in parallel
    on every CPU (each figure is its own work), shown as images."""
    columns = list(dict.fromkeys(r.censor for r in rows))
    groups = [columns[i:i + CENSORS_PER_FIGURE]
              for i in range(0, len(columns), CENSORS_PER_FIGURE)]
    jobs: list[tuple[str, str, list[Row], str]] = [
        ("status", "status", list(rows), "status per cell, k/n repetitions")]
    for i, group in enumerate(groups, 1):
        chosen = [r for r in rows if r.censor in group or r.censor == "none"]
        label = f"censors {group[0]} … {group[-1]}" if len(group) > 1 else group[0]
        jobs += [(f"goodput-{i}", "goodput", [r for r in chosen if r.censor in group],
                  f"goodput per cell, {label}"),
                 (f"goodput-relative-{i}", "goodput-relative", chosen,
                  f"goodput relative to no censor, {label}"),
                 (f"latency-{i}", "latency", [r for r in chosen if r.censor in group],
                  f"latency samples per cell, {label}")]
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        drawn = list(pool.map(_write_figure, [directory] * len(jobs),
                              [j[0] for j in jobs], [j[1] for j in jobs], [j[2] for j in jobs]))
    return "".join(_image(name, alt) for (name, _, _, alt), ok in zip(jobs, drawn, strict=True)
                   if ok)


def _heatmap_html(rows: Sequence[Row]) -> str:
    """Every cell's status as a table coloured like the status figure: a large
    matrix at a glance, each cell linking its page."""
    transports = list(dict.fromkeys(r.transport for r in rows))
    columns = list(dict.fromkeys(r.censor for r in rows))
    by_cell = {(r.transport, r.censor): r for r in rows}
    head = "<tr><th></th>" + "".join(
        f'<th class="vert"><span>{escape(c)}</span></th>' for c in columns) + "</tr>"
    body = []
    for t in transports:
        cells = []
        for c in columns:
            r = by_cell.get((t, c))
            if r is None:
                cells.append("<td></td>")
                continue
            short = (r.status[0].upper() if r.repetitions_ok is None
                     else f"{r.repetitions_ok}/{r.repetitions}")
            cells.append(f'<td class="status status-{escape(r.status)}" '
                         f'title="{escape(r.cell)}: {escape(cellfmt.summary(r))}">'
                         f'<a href="{CELL_PAGES}/{anchor(r)}.html">{escape(short)}</a></td>')
        body.append(f"<tr><th>{escape(t)}</th>{''.join(cells)}</tr>")
    return f'<table class="heatmap">{head}{"".join(body)}</table>'


def _write_cell_pages(results: Results, directory: Path,
                      events: dict[str, list[dict[str, Any]]]) -> None:
    """Each cell's drill-down on a page of its own, for a large run."""
    pages = directory / CELL_PAGES
    pages.mkdir(exist_ok=True)
    for r in results.rows:
        cell = _cell_html(r, events.get(Path(r.cell_dir).name if r.cell_dir else "", []),
                          directory, link_prefix="../")
        (pages / f"{anchor(r)}.html").write_text(
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(r.cell)}</title><style>{_CSS}</style></head><body>"
            f'<p><a href="../{REPORT_HTML}">the whole run</a></p>{cell}</body></html>\n',
            encoding="utf-8")


def render_html(results: Results, directory: Path | None = None) -> str:
    """The whole report as one HTML string; with ``directory`` (the run's results)
    the drill-down reads its events and logs and the figures are also written there."""
    rows = results.rows
    title = f"ptlab report — {Path(results.spec_path).name or results.spec_path}"
    events = _events_by_cell(directory)
    sections = [
        f"<h1>{escape(title)}</h1>",
        f"<p>Spec: <code>{escape(results.spec_path)}</code> · Run: "
        f"{escape(_time_span(results))}</p>",
        f'<p class="rtt"><strong>{escape(rtt_statement(results))}</strong></p>',
        "<h2>The experiment</h2>", _context_html(results),
        "<h2>Censors and their overrides</h2>", _censors_html(results),
        "<h2>Results</h2>",
    ]
    large = directory is not None and len(rows) > INLINE_CELLS
    if rows and large:
        assert directory is not None
        sections.append(f"<p>{len(rows)} cells: each row of the table and each square of "
                        "the heatmap opens the cell's own page.</p>")
        sections.append(_heatmap_html(rows))
        sections.append(_results_table_html(rows, pages=True))
        sections.append("<p>Status: reachable when at least half the repetitions got "
                        "through byte-exact (docs/lab/results.md §2).</p>")
        sections.append("<h2>Figures</h2>" + _large_figures_html(rows, directory))
        sections.append("<h2>Collateral damage by benign class</h2>"
                        "<p>Benign flows blocked / run, per class and censor, summed over "
                        "the transports' cells.</p>" + _collateral_html(rows))
        _write_cell_pages(results, directory, events)
    elif rows:
        sections.append(_results_table_html(rows))
        sections.append("<p>Status: reachable when at least half the repetitions got "
                        "through byte-exact (docs/lab/results.md §2).</p>")
        sections.append("<h2>Figures</h2>")
        sections.append(_figure("status", figures.status_grid(rows),
                                "status per cell, k/n repetitions", directory))
        sections.append(_figure("goodput", figures.goodput_facets(rows),
                                "goodput per cell, faceted by censor", directory))
        rel = figures.relative_goodput(rows)
        if rel is not None:
            sections.append(_figure("goodput-relative", rel,
                                    "goodput relative to no censor", directory))
        lat = figures.latency_points(rows)
        if lat is not None:
            sections.append(_figure("latency", lat, "latency samples per cell", directory))
        sections.append("<h2>Collateral damage by benign class</h2>"
                        "<p>Benign flows blocked / run, per class and censor, summed over "
                        "the transports' cells.</p>" + _collateral_html(rows))
        sections.append("<h2>Cells</h2>")
        sections += [_cell_html(r, events.get(Path(r.cell_dir).name if r.cell_dir else "", []),
                                directory) for r in rows]
    else:
        sections.append("<p>This run has no result rows.</p>")
    sections.append("<h2>Provenance</h2>" + _provenance_html(results.provenance))
    sections.append(f"<p>Schema version {results.schema_version}.</p>")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(sections) + "\n</body></html>\n")


def render_report(directory: Path | str) -> Path:
    """Read directory/results.json and write directory/report.html; returns its path."""
    directory = Path(directory)
    out = directory / REPORT_HTML
    out.write_text(render_html(load_results(directory), directory), encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: render the report for one results directory."""
    parser = argparse.ArgumentParser(
        prog="python -m ptlab.output.report", description="Render report.html from results.json.")
    parser.add_argument("results_dir", type=Path, help="directory holding results.json")
    args = parser.parse_args(argv)
    try:
        path = render_report(args.results_dir)
    except (OSError, ValueError) as exc:
        print(f"ptlab.output.report: error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
