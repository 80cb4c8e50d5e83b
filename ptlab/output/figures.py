"""The report's figures: readable at any matrix size, honest about n, colour-blind safe.

* Colours are the Okabe–Ito palette (Okabe & Ito 2008, "Color Universal
  Design"), whose blue/orange/grey stay distinct under the common colour-vision
  deficiencies; status is also written in every cell, never colour alone.
* Goodput, its ratio to no censor, and latency are faceted by censor (one
  panel per censor column, the transports as rows in every panel), so a large
  matrix is several small charts instead of one crowded axis.
* Every mark carries its n, written beside it; an interval is drawn wherever
  there is one, and where there is none (one repetition) the figure says so.
  With fewer than :data:`POINTS_BELOW` repetitions the repetitions themselves
  are drawn over the mean, because an interval from 2 or 3 numbers says little.
* A row with nothing to draw says why in the panel ("blocked 0/3", "ERROR",
  "skipped"), so no panel is an empty frame.
* Tick labels are placed by measuring them (ptlab/output/ticks.py), so they
  never overlap; every label sits inside the figure (constrained layout counts
  the margin labels and the legend).
* Each figure is written as SVG and PDF (vector, for papers) and PNG.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

# Figures on their own canvases, never pyplot: no global backend state.
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..common import stats
from ..common.results import Row
from . import cellfmt
from .ticks import readable_linear_axis, readable_log_axis

#: Okabe–Ito: blue (reachable), vermillion (blocked), grey (ERROR).
STATUS_COLOURS = {"reachable": "#0072B2", "blocked": "#D55E00", "ERROR": "#999999",
                  "skipped": "#E6E6E6"}
#: Text in a status's colour must stay legible on white: skipped's grey is darkened.
_TEXT_COLOURS = STATUS_COLOURS | {"ERROR": "#555555", "skipped": "#777777"}
_STATUS_RANK = {"reachable": 0, "blocked": 1, "ERROR": 2, "skipped": 3}
#: Below this many repetitions, draw the points themselves.
POINTS_BELOW = 5
BASELINE = "none"
#: The PNG's resolution (the test measures text at it).
PNG_DPI = 150
#: Facets per row of panels.
MAX_COLUMNS = 3
#: Font sizes (points): tick labels, margin and in-panel notes, panel titles.
TICK_PT, NOTE_PT, TITLE_PT = 7.5, 6.5, 8.5
#: Height of one transport's row, and the width of a panel's plotting area (inches).
ROW_IN, PANEL_IN = 0.28, 2.0


@dataclass(frozen=True)
class Rendered:
    """One figure in each format the results keep."""

    svg: str
    pdf: bytes
    png: bytes


def render(fig: Figure) -> Rendered:
    """SVG text, PDF and PNG bytes of a figure, all of the figure's own size (no
    tight cropping: what the figure test measures is what is written).

    The layout is solved once, at the PNG's resolution, and then kept for every
    format (it is in fractions of the figure, the same at any resolution). With
    no layout engine left, each format is one draw: savefig draws a figure that
    has an engine twice, a dry run for the layout and then the output, which
    made a 966-cell report's figures cost twice what they draw."""
    FigureCanvasAgg(fig)  # savefig picks each format's canvas; Agg is the figure's own
    svg, pdf, png = io.BytesIO(), io.BytesIO(), io.BytesIO()
    engine = fig.get_layout_engine()
    if engine is not None:
        dpi, fig.dpi = fig.dpi, PNG_DPI  # the layout measures text as the PNG draws it
        try:
            engine.execute(fig)
        finally:
            fig.dpi = dpi  # the vector formats' (an embedded image's resolution)
        # None, not "none" (a placeholder engine, which savefig still dry-runs);
        # the rc context keeps a matplotlibrc's autolayout from putting one back.
        with rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
            fig.set_layout_engine(None)
    fig.savefig(png, format="png", dpi=PNG_DPI)
    fig.savefig(svg, format="svg")
    fig.savefig(pdf, format="pdf")
    return Rendered(svg.getvalue().decode("utf-8"), pdf.getvalue(), png.getvalue())


def _mpl(text: str) -> str:
    """Escape "$" so matplotlib never reads a name as mathtext."""
    return text.replace("$", r"\$")


def _columns(rows: Sequence[Row]) -> tuple[list[str], list[str]]:
    return (list(dict.fromkeys(r.transport for r in rows)),
            list(dict.fromkeys(r.censor for r in rows)))


def _text_in(size_pt: float, text: str) -> float:
    """A rough width of ``text`` in inches, for sizing figures (not for fitting:
    constrained layout and the tick locator measure)."""
    return 0.56 * size_pt / 72 * max((len(line) for line in text.split("\n")), default=0)


def _why_not(row: Row | None, what: str) -> str:
    """What a row with nothing to draw says in its place."""
    if row is None:
        return "not run"
    if row.status in ("ERROR", "skipped") or row.status == "blocked":
        return cellfmt.status(row)
    return f"{cellfmt.status(row)}, no {what}"


@dataclass
class _Facets:
    """A figure of one panel per censor column, a row per transport in each."""

    fig: Figure
    panels: dict[str, Axes]
    transports: list[str]


def _facets(transports: list[str], columns: list[str], margin_labels: Sequence[str],
            panel_in: float = PANEL_IN) -> _Facets:
    """Panels for ``columns``, sized so their names, margin labels and tick labels
    have room; transport names on the first panel of each row of panels only."""
    ncols = min(MAX_COLUMNS, len(columns))
    nrows = math.ceil(len(columns) / ncols)
    names_in = _text_in(TICK_PT, max(transports, key=len, default=""))
    labels_in = _text_in(NOTE_PT, max(margin_labels, key=len, default=""))
    width = names_in + 0.3 + ncols * (panel_in + labels_in + 0.25)
    height = nrows * (ROW_IN * max(len(transports), 2) + 0.55) + 0.9
    fig = Figure(figsize=(width, height), layout="constrained")
    grid = fig.add_gridspec(nrows, ncols)
    panels = {}
    for i, column in enumerate(columns):
        ax = fig.add_subplot(grid[i // ncols, i % ncols])
        ax.set_yticks(range(len(transports)), [_mpl(t) for t in transports] if i % ncols == 0
                      else [""] * len(transports), fontsize=TICK_PT)
        ax.set_ylim(len(transports) - 0.5, -0.5)
        ax.tick_params(axis="x", labelsize=TICK_PT)
        ax.set_title(_mpl(f"censor: {column}"), fontsize=TITLE_PT)
        panels[column] = ax
    return _Facets(fig, panels, transports)


def _margin(ax: Axes, y: float, text: str) -> None:
    """A row's note (its n) just right of the panel."""
    ax.annotate(text, (1.03, y), xycoords=("axes fraction", "data"), va="center",
                fontsize=NOTE_PT, annotation_clip=False)


def _in_panel(ax: Axes, y: float, text: str, status: str) -> None:
    """Why a row has nothing drawn, written across the middle of its panel."""
    ax.text(0.5, y, text, transform=ax.get_yaxis_transform(), ha="center", va="center",
            fontsize=NOTE_PT, style="italic", color=_TEXT_COLOURS.get(status, "#555555"),
            bbox={"facecolor": "#fff", "edgecolor": "none", "pad": 1.5}, zorder=5)


def _log_limits(values: Sequence[float], pad: float = 1.6, must: Sequence[float] = ()
                ) -> tuple[float, float]:
    """Log-axis limits around ``values`` (and ``must``), at least a decade wide."""
    vs = [v for v in (*values, *must) if v > 0 and math.isfinite(v)]
    if not vs:
        return 0.1, 10.0
    lo, hi = min(vs) / pad, max(vs) * pad
    if hi / lo < 10:
        centre = math.sqrt(lo * hi)
        lo, hi = centre / math.sqrt(10), centre * math.sqrt(10)
    return lo, hi


def _legend(fig: Figure, handles: list[Line2D | Patch], xlabel: str) -> None:
    """The figure's one x-axis label and key, below every panel."""
    fig.supxlabel(xlabel, fontsize=TICK_PT, wrap=True)
    fig.legend(handles=handles, loc="outside upper center", ncols=min(len(handles), 4),
               fontsize=NOTE_PT, frameon=False, handlelength=1.5)


def _goodput_note(row: Row) -> str:
    """"n=3", "n=1, no CI", "n=1 of 3": how many repetitions the mean stands on."""
    n = len(row.goodput_samples)
    text = f"n={n}" if n == row.repetitions else f"n={n} of {row.repetitions}"
    return text + (", no CI" if row.goodput_ci95 is None else "")


def goodput_facets(rows: Sequence[Row]) -> Figure:
    """One panel per censor, a row per transport: the geometric mean (diamond) with
    its 95 % interval on a log axis (the scale the interval is computed on, so one
    wide interval does not flatten the rest), the repetitions as points when there
    are few, n at the right, and in the panel why a row has no goodput."""
    transports, censors = _columns(rows)
    by_cell = {(r.transport, r.censor): r for r in rows}
    measured = [r for r in rows if r.goodput_mbit_s is not None]
    f = _facets(transports, censors, [_goodput_note(r) for r in measured])
    # The samples and intervals hold every mean (a geometric mean lies among its samples).
    lo, hi = _log_limits([v for r in measured for v in (*r.goodput_samples,
                                                        *(r.goodput_ci95 or ()))])
    for censor, ax in f.panels.items():
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        readable_log_axis(ax.xaxis)
        ax.grid(axis="x", which="major", color="#ddd", lw=0.6)
        for y, t in enumerate(transports):
            r = by_cell.get((t, censor))
            if r is None or r.goodput_mbit_s is None:
                _in_panel(ax, y, _why_not(r, "goodput"), r.status if r else "")
                continue
            colour = STATUS_COLOURS[r.status]
            if r.goodput_ci95 is not None:
                ax.hlines(y, *r.goodput_ci95, color=colour, lw=2)
            if len(r.goodput_samples) < POINTS_BELOW:
                ax.plot(r.goodput_samples, [y] * len(r.goodput_samples), "o", ms=3,
                        color="#000", zorder=3)
            ax.plot([r.goodput_mbit_s], [y], "D", ms=5.5, color=colour, zorder=4, mec="#fff",
                    mew=0.5)
            _margin(ax, y, _goodput_note(r))
    _legend(f.fig, [
        Line2D([], [], marker="D", ls="", color=STATUS_COLOURS["reachable"],
               label="geometric mean (reachable)"),
        Line2D([], [], marker="D", ls="", color=STATUS_COLOURS["blocked"],
               label="of the repetitions through (blocked)"),
        Line2D([], [], color="#555", lw=2, label="95 % CI"),
        Line2D([], [], marker="o", ls="", ms=3, color="#000", label="repetition")],
        "goodput, Mbit/s (log scale).  n: repetitions that got through;  "
        "blocked k/n: k of n repetitions got through")
    return f.fig


def _sig(x: float) -> str:
    """A ratio to two significant figures: "0.62", "1.2", "0.0041", "37"."""
    if x >= 10:
        return f"{x:.0f}"
    return f"{x:#.2g}".rstrip(".") if x >= 1e-4 else f"{x:.1e}"


def _no_ratio(row: Row | None, baseline: Row | None) -> tuple[str, str]:
    """Why a censored cell has no ratio, and the status to colour it by."""
    if row is None:
        return "not run", ""
    if row.goodput_mbit_s is None:
        return _why_not(row, "goodput"), row.status
    if baseline is None:
        return f"no baseline ({BASELINE} not run)", ""
    return f"no baseline ({BASELINE}: {cellfmt.status(baseline)})", ""


def relative_goodput(rows: Sequence[Row]) -> Figure | None:
    """Each censored cell's goodput over the same transport's no-censor cell
    (1.0 = the censor costs nothing), one panel per censor, as a bar from 1 on a
    log axis with its 95 % interval (Welch's t on the logs, ptlab/common/stats.py)
    and, beside it, the ratio and the n of both cells. A bar with no interval
    (one repetition on either side) is drawn hollow and says so. None when no
    censored cell has a ratio."""
    base = {r.transport: r for r in rows if r.censor == BASELINE}
    censored = [r for r in rows if r.censor != BASELINE]
    ratios: dict[tuple[str, str], tuple[float, tuple[float, float] | None]] = {}
    for r in censored:
        b = base.get(r.transport)
        if b is not None and b.goodput_samples and r.goodput_samples:
            ratios[(r.transport, r.censor)] = stats.log_ratio_ci95(r.goodput_samples,
                                                                   b.goodput_samples)
    if not ratios:
        return None
    transports, columns = _columns(censored)
    by_cell = {(r.transport, r.censor): r for r in censored}
    notes = {}
    for (t, c), (ratio, ci) in ratios.items():
        n, n_base = len(by_cell[(t, c)].goodput_samples), len(base[t].goodput_samples)
        value = f"{_sig(ratio)} [{_sig(ci[0])}, {_sig(ci[1])}]" if ci else \
            f"{_sig(ratio)}, no interval"
        notes[(t, c)] = f"{value}\nn={n}, base {n_base}"
    f = _facets(transports, columns, list(notes.values()))
    lo, hi = _log_limits([v for ratio, ci in ratios.values() for v in (ratio, *(ci or ()))],
                         pad=1.4, must=[1.0])
    for column, ax in f.panels.items():
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        readable_log_axis(ax.xaxis)
        ax.grid(axis="x", which="major", color="#ddd", lw=0.6)
        ax.axvline(1.0, color="#000", lw=0.8, ls="--")
        for y, t in enumerate(transports):
            cell = by_cell.get((t, column))
            if cell is None or (t, column) not in ratios:
                _in_panel(ax, y, *_no_ratio(cell, base.get(t)))
                continue
            ratio, ci = ratios[(t, column)]
            colour = STATUS_COLOURS[cell.status]
            if ci is None:  # hollow: a number with no interval is not a finding
                ax.barh(y, ratio - 1, left=1, height=0.6, fill=False, edgecolor=colour,
                        hatch="////", lw=1)
            else:
                ax.barh(y, ratio - 1, left=1, height=0.6, color=colour)
                ax.errorbar(ratio, y, xerr=[[ratio - ci[0]], [ci[1] - ratio]], fmt="none",
                            ecolor="#000", elinewidth=1, capsize=2.5)
            # The ratio itself, seen even where the bar is a sliver (a ratio near 1).
            ax.plot([ratio], [y], "|", ms=9, mew=1.5, color="#000", zorder=4)
            _margin(ax, y, notes[(t, column)])
    _legend(f.fig, [
        Patch(color=STATUS_COLOURS["reachable"], label="reachable"),
        Patch(color=STATUS_COLOURS["blocked"], label="blocked (repetitions through)"),
        Line2D([], [], color="#000", marker="|", ms=6, label="ratio, 95 % CI"),
        Patch(fill=False, hatch="////", edgecolor="#555", label="no interval (n=1 on a side)")],
        "goodput ÷ the same transport's with no censor (log scale; 1 = no cost).  "
        "n: repetitions that got through, here and in the baseline")
    return f.fig


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
    names_in = _text_in(TICK_PT + 0.5, max(transports, key=len, default=""))
    fig = Figure(figsize=(max(4.0, 1.1 * len(censors) + names_in + 0.8),
                          max(2.5, 0.5 * len(transports) + 1.6)), layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=blank + 0.5, aspect="auto")
    for i in range(len(transports)):
        for j in range(len(censors)):
            ax.text(j, i, labels[i][j], ha="center", va="center", fontsize=TICK_PT,
                    color="#000" if grid[i][j] >= _STATUS_RANK["skipped"] else "#fff")
    # White rules between cells, so neighbours of one status stay apart.
    for x in range(1, len(censors)):
        ax.axvline(x - 0.5, color="#fff", lw=1.5)
    for y in range(1, len(transports)):
        ax.axhline(y - 0.5, color="#fff", lw=1.5)
    ax.set_xticks(range(len(censors)), [_mpl(c) for c in censors], rotation=30, ha="right",
                  rotation_mode="anchor", fontsize=TICK_PT)
    ax.set_yticks(range(len(transports)), [_mpl(t) for t in transports], fontsize=TICK_PT)
    ax.tick_params(length=0)
    ax.set_xlabel("censor", fontsize=TICK_PT + 0.5)
    ax.set_ylabel("transport", fontsize=TICK_PT + 0.5)
    ax.set_title("status; k/n: k of n repetitions got through", fontsize=TITLE_PT)
    return fig


def _latency_note(row: Row) -> str:
    """"n=10", "n=5, range 94 %": the samples and, below 95 %, what the interval reaches."""
    n = len(row.latency_samples)
    if row.latency_ci95 is None:
        return f"n={n}, no CI"
    level = row.latency_ci_level
    return f"n={n}" + (f", CI {level:.0%}" if level is not None and level < 0.95 else "")


def latency_points(rows: Sequence[Row]) -> Figure | None:
    """One panel per censor, a row per transport: each latency sample as a point,
    the median as a bar with its order-statistic interval, n at the right; None
    if no cell has samples. The axis is logarithmic when the samples span more
    than a decade, so a slow transport does not flatten the rest."""
    with_samples = [r for r in rows if r.latency_samples]
    if not with_samples:
        return None
    transports, censors = _columns(rows)
    by_cell = {(r.transport, r.censor): r for r in rows}
    f = _facets(transports, censors, [_latency_note(r) for r in with_samples])
    values = [v for r in with_samples for v in r.latency_samples]
    log = min(values) > 0 and max(values) / min(values) > 10
    if log:
        lo, hi = _log_limits(values, pad=1.3)
    else:
        span = (max(values) - min(values)) or max(abs(max(values)), 1.0)
        lo, hi = min(values) - 0.08 * span, max(values) + 0.08 * span
    for censor, ax in f.panels.items():
        if log:
            ax.set_xscale("log")
            ax.set_xlim(lo, hi)
            readable_log_axis(ax.xaxis)
        else:
            ax.set_xlim(lo, hi)
            readable_linear_axis(ax.xaxis)
        ax.grid(axis="x", which="major", color="#ddd", lw=0.6)
        for y, t in enumerate(transports):
            r = by_cell.get((t, censor))
            if r is None or not r.latency_samples:
                _in_panel(ax, y, _why_not(r, "samples"), r.status if r else "")
                continue
            ax.plot(r.latency_samples, [y] * len(r.latency_samples), "o", ms=3, alpha=0.55,
                    color=STATUS_COLOURS[r.status], mew=0)
            if r.latency_ci95 is not None:
                ax.hlines(y, *r.latency_ci95, color="#000", lw=1)
            if r.latency_ms is not None:
                ax.plot([r.latency_ms], [y], "|", ms=11, mew=2, color="#000")
            _margin(ax, y, _latency_note(r))
    _legend(f.fig, [
        Line2D([], [], marker="o", ls="", ms=3, color=STATUS_COLOURS["reachable"],
               label="request"),
        Line2D([], [], marker="|", ls="", ms=9, mew=2, color="#000", label="median"),
        Line2D([], [], color="#000", lw=1, label="median's CI (95 % or as stated)")],
        "request latency, ms" + (" (log scale)" if log else "") + ".  n: requests")
    return f.fig
