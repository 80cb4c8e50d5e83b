"""The evaluation's report: tables with intervals, ROC curves, portability, base rates.

``report.html`` is self-contained (the ROC curves are inline SVG drawn by
matplotlib) so it can be attached to a paper's artifact or a CI run as is.
"""

from __future__ import annotations

import html
import io
from pathlib import Path
from typing import Any


def _pct(v: float) -> str:
    return f"{100 * v:.2f} %"


def _ci(ci: list[float]) -> str:
    return f"[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]"


def summary_lines(result: dict[str, Any]) -> list[str]:
    """One line per (transport, model), and one per portability pair, for the terminal."""
    d = result["dataset"]
    lines = [f"dataset {d['name']}: {d['flows']} flows, held out {result['split']['test']} "
             f"(seed {result['options']['seed']})"]
    for task in result["tasks"]:
        for m in task["models"]:
            br = m["base_rate"]["at_fpr_upper95"]
            lines.append(
                f"{task['positive']:>8} {m['kind']:>14}: TPR {_pct(m['tpr'])} {_ci(m['tpr_ci95'])}"
                f"  FPR {_pct(m['fpr'])} {_ci(m['fpr_ci95'])}  AUC {m['auc']:.4f}  "
                f"precision at prevalence {br['prevalence']:g} (FPR upper bound) "
                f"{br['precision']:.2e}")
    for p in result["portability"]:
        lines.append(f"{p['positive']:>8} {p['kind']:>14}: train {p['train_setting']} → test "
                     f"{p['test_setting']}: TPR {_pct(p['same']['tpr'])} → "
                     f"{_pct(p['cross']['tpr'])}, FPR {_pct(p['same']['fpr'])} → "
                     f"{_pct(p['cross']['fpr'])}")
    return lines


def _roc_svg(task: dict[str, Any]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    for m in task["models"]:
        xs, ys = zip(*m["roc"], strict=True) if m["roc"] else ((), ())
        ax.step(xs, ys, where="post", label=f"{m['kind']} (AUC {m['auc']:.3f})")
        ax.plot([m["fpr"]], [m["tpr"]], "o", ms=4, color=ax.lines[-1].get_color())
    ax.plot([0, 1], [0, 1], ":", color="grey", lw=0.8)
    ax.set_xlabel("false-positive rate (benign flows flagged)")
    ax.set_ylabel("true-positive rate")
    ax.set_title(f"{task['positive']} vs benign (held out: {task['test']} flows)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xlim(-0.01, 1.0)
    ax.set_ylim(0.0, 1.01)
    buf = io.StringIO()
    fig.tight_layout()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def render(result: dict[str, Any], out: Path) -> Path:
    """Write ``report.html`` into `out` and return its path."""
    e = html.escape
    d = result["dataset"]
    parts = [f"<!doctype html><meta charset=utf-8><title>ptlab evaluate: {e(str(d['name']))}"
             "</title><style>body{font-family:sans-serif;max-width:70em;margin:2em auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
             "text-align:right}th{background:#eee}.l{text-align:left}</style>",
             f"<h1>Learning censor: {e(str(d['name']))}</h1>",
             f"<p>{d['flows']} flows (window {d['window']} packets), dataset SHA-256 "
             f"<code>{e(d['sha256'][:16])}…</code>; held out {result['split']['test']} "
             f"flows, seed {result['options']['seed']}. Counts: "
             f"<code>{e(str(d['counts']))}</code>. Intervals are Wilson 95 %. Flows shorter "
             "than a model's window are not flagged (the censor abstains); the TPR over the "
             "flows it decided leaves them out.</p>"]
    for task in result["tasks"]:
        parts.append(f"<h2>{e(task['positive'])} against benign flows</h2>")
        parts.append("<table><tr><th class=l>detector</th><th>TPR</th><th>95 % CI</th>"
                     "<th>FPR</th><th>95 % CI</th><th>AUC</th><th>abstained</th>"
                     "<th>TPR of decided</th><th>95 % CI</th>"
                     "<th>comparisons (mean/max)</th><th class=l>FPR by benign app</th></tr>")
        for m in task["models"]:
            comp = m.get("comparisons")
            comp_s = f"{comp['mean']} / {comp['max']}" if comp else "–"
            apps = ", ".join(f"{a} {v['flagged']}/{v['flows']}"
                             for a, v in m["fpr_by_app"].items())
            parts.append(
                f"<tr><td class=l>{e(m['kind'])}</td><td>{_pct(m['tpr'])}</td>"
                f"<td>{_ci(m['tpr_ci95'])}</td><td>{_pct(m['fpr'])}</td>"
                f"<td>{_ci(m['fpr_ci95'])}</td><td>{m['auc']:.4f}</td>"
                f"<td>{m['abstained']}</td>"
                f"<td>{_pct(m['decided']['tpr'])}</td><td>{_ci(m['decided']['tpr_ci95'])}</td>"
                f"<td>{comp_s}</td>"
                f"<td class=l>{e(apps)}</td></tr>")
        parts.append("</table>")
        parts.append(_roc_svg(task))
        parts.append("<h3>Base rate</h3><table><tr><th class=l>detector</th><th>prevalence</th>"
                     "<th>precision at FPR</th><th>innocent flags per true one</th>"
                     "<th>precision at FPR's 95 % upper bound</th>"
                     "<th>innocent flags per true one</th></tr>")
        for m in task["models"]:
            a, b = m["base_rate"]["at_fpr"], m["base_rate"]["at_fpr_upper95"]
            parts.append(f"<tr><td class=l>{e(m['kind'])}</td><td>{a['prevalence']:g}</td>"
                         f"<td>{a['precision']:.3g}</td><td>{a['false_per_true']:.3g}</td>"
                         f"<td>{b['precision']:.3g}</td><td>{b['false_per_true']:.3g}</td></tr>")
        parts.append("</table>")
    if result["portability"]:
        parts.append("<h2>Portability: train on one link setting, test on another</h2>"
                     "<table><tr><th class=l>transport</th><th class=l>detector</th>"
                     "<th class=l>train → test</th><th>TPR same</th><th>TPR cross</th>"
                     "<th>FPR same</th><th>FPR cross</th><th>TPR drop</th><th>FPR rise</th></tr>")
        for p in result["portability"]:
            parts.append(
                f"<tr><td class=l>{e(p['positive'])}</td><td class=l>{e(p['kind'])}</td>"
                f"<td class=l>{e(p['train_setting'])} → {e(p['test_setting'])}</td>"
                f"<td>{_pct(p['same']['tpr'])}</td><td>{_pct(p['cross']['tpr'])}</td>"
                f"<td>{_pct(p['same']['fpr'])}</td><td>{_pct(p['cross']['fpr'])}</td>"
                f"<td>{_pct(p['tpr_drop'])}</td><td>{_pct(p['fpr_rise'])}</td></tr>")
        parts.append("</table>")
    path = Path(out) / "report.html"
    path.write_text("\n".join(parts) + "\n")
    return path
