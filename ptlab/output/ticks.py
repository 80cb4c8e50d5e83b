"""Axis ticks whose labels never overlap, at any data range and any axis length.

matplotlib's log axis labels the minor ticks when the view spans less than a
decade or so, whatever the room: a narrow facet then printed ``4×10²6×10²``.
Here the locator measures its labels instead: of a list of tick sets, densest
first, it takes the first whose labels, at the axis's real length and font,
leave a gap between neighbours. On a log axis the sets are mantissas per
decade (1 2 3 4 5 6 7 8 9, then 1 2 3 5, 1 2 5, 1 3, 1), then one decade in
2, 3, 5, 10, ...; on a linear axis, 1-2-2.5-5 steps with fewer and fewer bins.
When none fits, every k-th tick of the sparsest set; the last resort is one
tick, which always fits.

Labels are plain numbers ("0.05", "2", "300", "20000") between 0.001 and 10⁵,
which a reader takes in at a glance, and m×10^k beyond.

The locator is called again at every draw, with the axis as it is then laid
out, so SVG, PDF and PNG of one figure get the ticks that fit each.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator

from matplotlib.axis import Axis, XAxis
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath
from matplotlib.ticker import FuncFormatter, Locator, MaxNLocator, NullFormatter

#: Space between two neighbouring labels, in ems of their font.
GAP_EM = 1.0
#: Mantissas per decade, densest first.
_MANTISSAS = ((1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 3, 5), (1, 2, 5), (1, 3), (1,))
#: Each tick label's extent along its axis, in points (None: no axis to measure).
Spans = list[tuple[float, float]] | None
#: How far (points) a label keeps from the figure's edge: the measure here and the
#: renderer's differ by a fraction of a point.
_EDGE_CLEARANCE_PT = 1.0
#: Plain decimals in this range; m×10^k outside it.
_PLAIN = (1e-3, 1e5)

_measure = TextToPath()


def number_label(value: float) -> str:
    """A tick value as a reader writes it: "0.05", "2", "1.5", "20000", "$2\\times10^{6}$"."""
    if value == 0:
        return "0"
    if _PLAIN[0] <= abs(value) < _PLAIN[1]:
        text = f"{value:.6f}".rstrip("0").rstrip(".")
        return text.replace("-", "\N{MINUS SIGN}")
    exp = math.floor(math.log10(abs(value)))
    mantissa = round(value / 10 ** exp, 6)
    sign = "-" if value < 0 else ""
    if abs(mantissa) == 1:
        return f"${sign}10^{{{exp}}}$"
    return f"${mantissa:g}\\times10^{{{exp}}}$"


def log_tick_sets(vmin: float, vmax: float) -> Iterator[list[float]]:
    """Tick sets in [vmin, vmax] (both > 0), densest first; in a view narrower than
    a decade, then evenly spaced ones (410 420 430), as no two mantissas may fall in it."""
    lo, hi = math.floor(math.log10(vmin)), math.ceil(math.log10(vmax))
    eps = (math.log10(vmax) - math.log10(vmin)) * 1e-9

    def inside(v: float) -> bool:
        return math.log10(vmin) - eps <= math.log10(v) <= math.log10(vmax) + eps

    def value(m: int, e: int) -> float:
        return float(f"{m}e{e}")  # exactly the decimal: 6e-1 is 0.6, not 0.6000000000000001

    for mantissas in _MANTISSAS:
        yield [value(m, e) for e in range(lo, hi + 1) for m in mantissas if inside(value(m, e))]
    stride = 2
    while stride <= hi - lo + 1:
        yield [value(1, e) for e in range(lo, hi + 1) if e % stride == 0 and inside(value(1, e))]
        stride = {2: 3, 3: 5}.get(stride, stride * 2)
    if vmax / vmin < 10:  # too narrow for two mantissas: evenly spaced numbers
        yield from linear_tick_sets(vmin, vmax)


def linear_tick_sets(vmin: float, vmax: float) -> Iterator[list[float]]:
    """Tick sets in [vmin, vmax] at 1-2-2.5-5 steps, densest first."""
    eps = (vmax - vmin) * 1e-9
    for bins in range(8, 0, -1):
        locs = MaxNLocator(nbins=bins, steps=[1, 2, 2.5, 5, 10]).tick_values(vmin, vmax)
        yield [float(v) for v in locs if vmin - eps <= v <= vmax + eps]


class FittingLocator(Locator):
    """The densest of ``tick_sets`` whose labels fit along the axis with a gap.

    Two ticks or more are preferred to one: when no set fits whole, every k-th
    tick of the sparsest sets is tried; then a single tick of a set, and last
    the middle of the view.
    """

    def __init__(self, tick_sets: Callable[[float, float], Iterator[list[float]]],
                 label: Callable[[float], str] = number_label, log: bool = False) -> None:
        self.tick_sets = tick_sets
        self.label = label
        self.log = log

    def __call__(self) -> list[float]:
        vmin, vmax = self.axis.get_view_interval() if self.axis else (1.0, 10.0)
        return self.tick_values(vmin, vmax)

    def tick_values(self, vmin: float, vmax: float) -> list[float]:
        vmin, vmax = sorted((float(vmin), float(vmax)))
        if self.log and vmax <= 0:
            vmin, vmax = 1.0, 10.0
        elif self.log:
            vmin = max(vmin, vmax * 1e-12)
        if vmin == vmax:  # a degenerate view: room around the one value
            vmin, vmax = (vmin / 2, vmax * 2) if self.log else (vmin - 1, vmax + 1)
        single: list[float] = []
        several: list[tuple[list[float], Spans]] = []
        for ticks in self.tick_sets(vmin, vmax):
            ticks, spans = self._inside_figure(ticks)
            if len(ticks) == 1:
                single = single or ticks
            elif ticks:
                if self._fits(spans):
                    return ticks
                several.append((ticks, spans))
        # None fits whole: every k-th tick of the sparsest sets (200 1000 of 200 500 1000).
        for ticks, spans in reversed(several):
            for step in range(2, len(ticks)):
                if len(ticks[::step]) >= 2 and self._fits(
                        spans[::step] if spans is not None else None):
                    return ticks[::step]
        if single:
            return single
        mid = math.sqrt(vmin * vmax) if self.log else (vmin + vmax) / 2
        return [mid]

    def _inside_figure(self, ticks: list[float]) -> tuple[list[float], Spans]:
        """``ticks`` less those at either end whose labels would leave the figure, and
        the labels' spans (None with no axis to measure), measured once for both
        this and :meth:`_fits`.

        Why: the layout (constrained) makes room around a panel for the labels of
        the ticks the locator gave at *its* pass; the final draw asks again at the
        laid-out length, where a set with a label nearer the end may fit. Such a
        label can hang past the figure's edge (hypothesis found "0.3" at the right
        end of the last panel, 0.75 px out). Dropping that tick keeps the rest of
        the set (0.01 0.03 0.1), where refusing the set would lose a density."""
        axis = self.axis
        if len(ticks) < 2 or not isinstance(axis, Axis) or axis.axes is None:
            return ticks, None
        spans = self._spans(ticks)
        box = axis.axes.figure.bbox
        horizontal = isinstance(axis, XAxis)
        ppp = 72.0 / axis.axes.figure.dpi
        lo, hi = ((box.x0, box.x1) if horizontal else (box.y0, box.y1))
        lo, hi = lo * ppp + _EDGE_CLEARANCE_PT, hi * ppp - _EDGE_CLEARANCE_PT
        kept = [i for i, (a, b) in enumerate(spans) if lo <= a and b <= hi]
        return [ticks[i] for i in kept], [spans[i] for i in kept]

    def _spans(self, ticks: list[float]) -> list[tuple[float, float]]:
        """Each tick's label's extent along the axis as it is laid out now, in points."""
        axis = self.axis
        assert isinstance(axis, Axis) and axis.axes is not None
        ax = axis.axes
        horizontal = isinstance(axis, XAxis)
        font = axis.get_major_ticks(1)[0].label1.get_fontproperties()
        points_per_pixel = 72.0 / ax.figure.dpi
        if horizontal:
            where = ax.get_xaxis_transform().transform([(v, 0.0) for v in ticks])[:, 0]
        else:
            where = ax.get_yaxis_transform().transform([(0.0, v) for v in ticks])[:, 1]
        spans = []
        for v, px in zip(ticks, where, strict=True):
            size = _label_size(self.label(v), font, horizontal)
            centre = px * points_per_pixel
            spans.append((centre - size / 2, centre + size / 2))
        return spans

    def _fits(self, spans: Spans) -> bool:
        """Whether labels at these ``spans`` (of :meth:`_spans`) leave a gap of GAP_EM
        between neighbours (True with no axis to measure)."""
        axis = self.axis
        if spans is None or not isinstance(axis, Axis):
            return True
        font = axis.get_major_ticks(1)[0].label1.get_fontproperties()
        gap = GAP_EM * font.get_size_in_points()
        ordered = sorted(spans)
        return all(b[0] - a[1] >= gap for a, b in zip(ordered, ordered[1:], strict=False))


@functools.lru_cache(maxsize=4096)
def _label_size(text: str, font: FontProperties, horizontal: bool) -> float:
    """A label's extent along its axis, in points: its width or its height (cached:
    a draw asks the locator many times, for the same few labels)."""
    width, height, _ = _measure.get_text_width_height_descent(
        text, font, ismath=text.startswith("$") and text.endswith("$"))
    return float(width if horizontal else height)


class LogMinorLocator(Locator):
    """Unlabelled minor ticks: 2..9 in each decade over a view of a few decades, one
    per decade over a wider one (where 2..9 would be a smear, and slow to draw)."""

    def __call__(self) -> list[float]:
        vmin, vmax = self.axis.get_view_interval() if self.axis else (1.0, 10.0)
        return self.tick_values(vmin, vmax)

    def tick_values(self, vmin: float, vmax: float) -> list[float]:
        vmin, vmax = sorted((float(vmin), float(vmax)))
        if vmin <= 0 or vmax <= vmin:
            return []
        lo, hi = math.floor(math.log10(vmin)), math.ceil(math.log10(vmax))
        subs = range(1, 10) if hi - lo <= 3 else (1,)
        return [m * 10.0 ** e for e in range(lo, hi + 1) for m in subs
                if vmin <= m * 10.0 ** e <= vmax]


def readable_log_axis(axis: Axis) -> None:
    """Log-scale ``axis`` with major labels that fit and unlabelled minor ticks."""
    axis.set_major_locator(FittingLocator(log_tick_sets, log=True))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: number_label(v)))
    axis.set_minor_locator(LogMinorLocator())
    axis.set_minor_formatter(NullFormatter())


def readable_linear_axis(axis: Axis) -> None:
    """Linear ``axis`` with labels that fit."""
    axis.set_major_locator(FittingLocator(linear_tick_sets))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: number_label(v)))
