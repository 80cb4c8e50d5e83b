"""Tick labels that fit: measured on a real axis of any length and any range."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ptlab.output.ticks import (
    linear_tick_sets,
    log_tick_sets,
    number_label,
    readable_linear_axis,
    readable_log_axis,
)


def _drawn_labels(width_in: float, lo: float, hi: float, log: bool) -> list:
    fig = Figure(figsize=(width_in + 0.8, 1.2), dpi=150, layout="constrained")
    ax = fig.add_subplot()
    if log:
        ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    (readable_log_axis if log else readable_linear_axis)(ax.xaxis)
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's, just drawn
    locs = ax.xaxis.get_majorticklocs()
    ticks = ax.xaxis.get_major_ticks(len(locs))
    # The ticks matplotlib draws: those in the view, to within rounding (a tick at
    # 1e-4 is drawn on a view from 10 ** -3.9999999999999996).
    eps = (math.log10(hi) - math.log10(lo) if log else hi - lo) * 1e-9
    return [(t.label1.get_text(), t.label1.get_window_extent(renderer))
            for loc, t in zip(locs, ticks, strict=True)
            if (math.log10(lo) - eps <= math.log10(loc) <= math.log10(hi) + eps if log
                else lo - eps <= loc <= hi + eps)]


def _apart(labels: list) -> bool:
    return all(min(a.x1, b.x1) <= max(a.x0, b.x0)
               for (_, a), (_, b) in itertools.combinations(labels, 2))


@settings(max_examples=30, deadline=None)
@given(lo=st.floats(-4.0, 6.0), decades=st.floats(0.01, 9.0), width=st.floats(0.4, 8.0))
def test_log_labels_never_overlap(lo: float, decades: float, width: float) -> None:
    labels = _drawn_labels(width, 10 ** lo, 10 ** (lo + decades), log=True)
    assert labels and all(text for text, _ in labels)
    assert _apart(labels), [text for text, _ in labels]


@settings(max_examples=20, deadline=None)
@given(lo=st.floats(-1e4, 1e4), span=st.floats(1e-3, 1e5), width=st.floats(0.4, 8.0))
def test_linear_labels_never_overlap(lo: float, span: float, width: float) -> None:
    labels = _drawn_labels(width, lo, lo + span, log=False)
    assert labels and _apart(labels), [text for text, _ in labels]


def test_a_wide_axis_labels_the_mantissas_and_a_narrow_one_thins_them() -> None:
    wide = [t for t, _ in _drawn_labels(7.0, 150, 3000, log=True)]
    assert wide == ["200", "300", "500", "1000", "2000", "3000"]
    wider = [t for t, _ in _drawn_labels(7.0, 150, 700, log=True)]
    assert wider == ["200", "300", "400", "500", "600", "700"]
    narrow = [t for t, _ in _drawn_labels(0.8, 150, 3000, log=True)]
    assert 2 <= len(narrow) < len(wide) and set(narrow) <= set(wide)
    # The reported overlap: labels at 4×10² and 6×10² on a narrow facet.
    assert "$\\mathdefault{4\\times10^{2}}$" not in narrow


def test_tick_sets() -> None:
    dense, *rest = log_tick_sets(0.5, 200)
    assert dense[:3] == [0.5, 0.6, 0.7] and dense[-1] == 200
    assert [1.0, 10.0, 100.0] in rest
    # Narrower than two mantissas: evenly spaced numbers.
    assert [410.0, 420.0, 430.0, 440.0] in list(log_tick_sets(405, 445))
    assert next(iter(linear_tick_sets(0, 1))) == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])


@pytest.mark.parametrize(("value", "label"), [
    (0.001, "0.001"), (0.05, "0.05"), (1.5, "1.5"), (2.0, "2"), (300.0, "300"),
    (20000.0, "20000"), (2e6, "$2\\times10^{6}$"), (1e-4, "$10^{-4}$"), (0.0, "0"),
    (-3.0, "\N{MINUS SIGN}3")])
def test_number_label(value: float, label: str) -> None:
    assert number_label(value) == label
    assert math.isfinite(value)
