"""The report's figures: readable at any matrix size, honest about n, colour-blind safe.

* Colours are the Okabe–Ito palette (Okabe & Ito 2008, "Color Universal
  Design"), whose blue/orange/grey stay distinct under the common colour-vision
  deficiencies; status is also written in every cell, never colour alone.
* Goodput is faceted by censor (one panel per censor column), so a large matrix
  is several small charts instead of one crowded axis; with fewer than
  :data:`POINTS_BELOW` repetitions the repetitions themselves are drawn as
  points over the bar, because an interval from 2 or 3 numbers says little.
* Goodput is also shown relative to the same transport's no-censor cell, which
  is what a censor costs.
* Each figure is rendered as SVG (scales, selectable text) and PNG.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

# The Agg/SVG canvases directly, never pyplot: no global backend state.
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from ..common.results import Row

#: Okabe–Ito: blue (reachable), vermillion (blocked), grey (ERROR).
STATUS_COLOURS = {"reachable": "#0072B2", "blocked": "#D55E00", "ERROR": "#999999",
                  "skipped": "#E6E6E6"}
_STATUS_RANK = {"reachable": 0, "blocked": 1, "ERROR": 2, "skipped": 3}
#: Below this many repetitions, draw the points themselves.
POINTS_BELOW = 5
BASELINE = "none"


def render(fig: Figure) -> tuple[str, bytes]:
    """(SVG text, PNG bytes) of a figure."""
    svg = io.StringIO()
    FigureCanvasSVG(fig).print_svg(svg)
    png = io.BytesIO()
    FigureCanvasAgg(fig)
    fig.savefig(png, format="png", dpi=150, bbox_inches="tight")
    return svg.getvalue(), png.getvalue()


def _mpl(text: str) -> str:
    """Escape "$" so matplotlib never reads a name as mathtext."""
    return text.replace("$", r"\$")


def _columns(rows: Sequence[Row]) -> tuple[list[str], list[str]]:
    return (list(dict.fromkeys(r.transport for r in rows)),
            list(dict.fromkeys(r.censor for r in rows)))


def goodput_facets(rows: Sequence[Row]) -> Figure:
    """One panel per censor, a line per transport: the geometric mean (diamond) with
    its 95 % interval on a log axis (the scale the interval is computed on, so one
    wide interval does not flatten the rest), the repetitions as points when there
    are few, and k/n or n at the right."""
    transports, censors = _columns(rows)
    ncols = min(3, len(censors))
    nrows = math.ceil(len(censors) / ncols)
    fig = Figure(figsize=(4.4 * ncols, (0.32 * max(len(transports), 3) + 1.2) * nrows),
                 layout="constrained")
    by_cell = {(r.transport, r.censor): r for r in rows}
    values = [v for r in rows for v in (r.goodput_samples + list(r.goodput_ci95 or ())
                                        + ([r.goodput_mbps] if r.goodput_mbps else []))
              if v > 0]
    lo_x, hi_x = (min(values) / 1.6, max(values) * 1.6) if values else (0.1, 10.0)
    for i, censor in enumerate(censors):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        ax.set_xscale("log")
        for y, t in enumerate(transports):
            r = by_cell.get((t, censor))
            if r is None:
                continue
            colour = STATUS_COLOURS[r.status]
            if r.goodput_mbps is not None:
                if r.goodput_ci95 is not None:
                    ax.hlines(y, *r.goodput_ci95, color=colour, lw=2)
                if len(r.goodput_samples) < POINTS_BELOW:
                    ax.plot(r.goodput_samples, [y] * len(r.goodput_samples), "o", ms=3.5,
                            color="#000", zorder=3)
                ax.plot([r.goodput_mbps], [y], "D", ms=6, color=colour, zorder=4)
            label = (f"n={len(r.goodput_samples)}" if r.status == "reachable" else
                     f"{r.status} {r.repetitions_ok}/{r.repetitions}"
                     if r.repetitions_ok is not None else r.status)
            ax.annotate(label, (1.02, y), xycoords=("axes fraction", "data"), va="center",
                        fontsize=7)
        ax.set_yticks(range(len(transports)), [_mpl(t) for t in transports], fontsize=8)
        ax.set_ylim(len(transports) - 0.5, -0.5)
        ax.set_xlim(lo_x, hi_x)
        ax.grid(axis="x", which="major", color="#ddd", lw=0.6)
        ax.set_title(_mpl(f"censor: {censor}"), fontsize=9)
        ax.set_xlabel("goodput, Mbit/s (log scale; geometric mean, 95 % CI)", fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    return fig


def relative_goodput(rows: Sequence[Row]) -> Figure | None:
    """Each censored cell's goodput over the same transport's no-censor cell
    (1.0 = the censor costs nothing); None when no transport has both."""
    base = {r.transport: r.goodput_mbps for r in rows
            if r.censor == BASELINE and r.goodput_mbps}
    pts = [(r, r.goodput_mbps / base[r.transport]) for r in rows
           if r.censor != BASELINE and r.transport in base and r.goodput_mbps]
    if not pts:
        return None
    fig = Figure(figsize=(6.5, 0.32 * len(pts) + 1.4), layout="constrained")
    ax = fig.add_subplot()
    for y, (r, ratio) in enumerate(pts):
        ax.barh(y, ratio, color=STATUS_COLOURS[r.status])
        ax.text(ratio, y, f" {ratio:.2f}", va="center", fontsize=7)
    ax.axvline(1.0, color="#000", lw=0.8, ls="--")
    ax.set_yticks(range(len(pts)), [_mpl(f"{r.transport} × {r.censor}") for r, _ in pts],
                  fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("goodput relative to the same transport with no censor", fontsize=8)
    return fig


def status_grid(rows: Sequence[Row]) -> Figure:
    """Transports × censors, each cell coloured by status and labelled k/n."""
    transports, censors = _columns(rows)
    blank = len(_STATUS_RANK)  # a cell with no row
    grid = [[blank] * len(censors) for _ in transports]
    labels = [["no run"] * len(censors) for _ in transports]
    for r in rows:
        i, j = transports.index(r.transport), censors.index(r.censor)
        grid[i][j] = _STATUS_RANK[r.status]
        k = f"\n{r.repetitions_ok}/{r.repetitions}" if r.repetitions_ok is not None else ""
        labels[i][j] = r.status + k
    cmap = ListedColormap([STATUS_COLOURS[s] for s in _STATUS_RANK] + ["#ffffff"])
    fig = Figure(figsize=(max(4.0, 1.5 * len(censors) + 2),
                          max(2.5, 0.6 * len(transports) + 1.5)), layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=blank + 0.5, aspect="auto")
    for i in range(len(transports)):
        for j in range(len(censors)):
            ax.text(j, i, labels[i][j], ha="center", va="center", fontsize=8,
                    color="#000" if grid[i][j] >= _STATUS_RANK["skipped"] else "#fff")
    ax.set_xticks(range(len(censors)), [_mpl(c) for c in censors], rotation=30, ha="right",
                  fontsize=8)
    ax.set_yticks(range(len(transports)), [_mpl(t) for t in transports], fontsize=8)
    ax.set_xlabel("censor")
    ax.set_ylabel("transport")
    return fig


def latency_points(rows: Sequence[Row]) -> Figure | None:
    """Each cell's latency samples as points with the median marked; None if none."""
    with_samples = [r for r in rows if r.latency_samples]
    if not with_samples:
        return None
    fig = Figure(figsize=(6.5, 0.32 * len(with_samples) + 1.4), layout="constrained")
    ax = fig.add_subplot()
    for y, r in enumerate(with_samples):
        ax.plot(r.latency_samples, [y] * len(r.latency_samples), "o", ms=3, alpha=0.6,
                color=STATUS_COLOURS[r.status])
        if r.latency_ms is not None:
            ax.plot([r.latency_ms], [y], "|", ms=14, mew=2, color="#000")
        ax.text(max(r.latency_samples), y, f"  n={len(r.latency_samples)}", va="center",
                fontsize=7)
    ax.set_yticks(range(len(with_samples)),
                  [_mpl(f"{r.transport} × {r.censor}") for r in with_samples], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("request latency, ms (points: samples; bar: median)", fontsize=8)
    return fig
