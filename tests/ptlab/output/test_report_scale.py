"""A report that scales with the matrix: above INLINE_CELLS cells it is an overview
(heatmap, table, figures per group of censor columns) with a page per cell, and a
full.toml-sized run's report opens in headless chromium in under 5 seconds (issue
47 asks for that as a test; benchmarks/report_scale.py prints the figures)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptlab.common.results import write_results
from ptlab.output import report
from tests.support.chromium import CHROMIUM, load_ms
from tests.support.rows import default_shape_run, matrix_run, results_of


def render(tmp_path: Path, rows) -> str:
    write_results(results_of(rows), tmp_path)
    return report.render_report(tmp_path).read_text()


def test_a_large_run_is_an_overview_with_a_page_per_cell(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "INLINE_CELLS", 5)
    monkeypatch.setattr(report, "CENSORS_PER_FIGURE", 2)
    rows = default_shape_run()
    html = render(tmp_path, rows)
    pages = sorted((tmp_path / report.CELL_PAGES).iterdir())
    assert len(pages) == 12
    # Every row of the table and every square of the heatmap opens its cell's page.
    links = set(re.findall(r'href="(report-cells/[^"]+\.html)"', html))
    assert {f"report-cells/{p.name}" for p in pages} == links
    assert 'class="heatmap"' in html and "<section class=\"cell\"" not in html
    # Goodput and latency per group of two censor columns (3 columns: 2 groups).
    figs = {p.stem for p in (tmp_path / report.FIGURES_DIR).glob("*.png")}
    assert {"status", "goodput-1", "goodput-2", "latency-1"} <= figs
    assert "goodput-3" not in figs and "goodput" not in figs
    assert 'loading="lazy"' in html
    # A cell's page leads back to the run and to its own files.
    page = (tmp_path / report.CELL_PAGES / pages[0].name).read_text()
    assert f'href="../{report.REPORT_HTML}"' in page


def test_a_small_run_stays_one_self_contained_page(tmp_path):
    html = render(tmp_path, default_shape_run())
    assert not (tmp_path / report.CELL_PAGES).exists()
    assert html.count('<section class="cell"') == 12 and "<svg" in html


@pytest.mark.slow  # draws a 966-cell run's 22 figures: minutes of CPU
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup "
                                              "installs it)")
def test_a_966_cell_report_opens_in_chromium_in_under_5_s(tmp_path):
    rows = matrix_run()
    assert len(rows) == 966
    html = render(tmp_path, rows)
    assert len(html) < 2_000_000  # the overview, not 966 drill-downs
    assert len(list((tmp_path / report.CELL_PAGES).iterdir())) == 966
    assert load_ms(report.REPORT_HTML, tmp_path, timeout=120) < 5000
