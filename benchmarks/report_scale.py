"""How the report scales with the matrix: a full.toml-sized run (966 cells, generated
by tests/support/rows.py) rendered, then opened in headless chromium.

Prints the time to render the report (the overview, 966 cell pages and the figures
per group of six censor columns, drawn in parallel), the overview's size, and the
load event of the overview in chromium, beside the same for the 12-cell default
run's single page. The goal (issue 47): under 5 seconds to load the large report.

Run: ``.venv/bin/python benchmarks/report_scale.py`` (a few minutes of CPU on 2
vCPUs, most of it drawing the 966-cell run's figures); ``--out DIR`` keeps them.
tests/ptlab/output/test_report_scale.py holds the load to its goal; this prints
the figures.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ptlab.common.results import write_results  # noqa: E402
from ptlab.output import report  # noqa: E402
from tests.support.chromium import CHROMIUM, load_ms  # noqa: E402
from tests.support.rows import default_shape_run, matrix_run, results_of  # noqa: E402

LOAD_GOAL_MS = 5000


def measure(name: str, rows: list, out: Path, chromium: str | None) -> dict:
    out.mkdir(parents=True)
    write_results(results_of(rows), out)
    t0 = time.perf_counter()
    html = report.render_report(out)
    render_s = time.perf_counter() - t0
    pages = out / report.CELL_PAGES
    return {"run": name, "cells": len(rows), "render_s": render_s,
            "overview_kb": html.stat().st_size / 1024,
            "cell_pages": len(list(pages.iterdir())) if pages.exists() else 0,
            "load_ms": load_ms(report.REPORT_HTML, out) if chromium else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="keep the reports here")
    args = ap.parse_args()
    chromium = CHROMIUM
    if chromium is None:
        print("chromium is not installed (scripts/setup installs it): no load times")
    base = args.out or Path(tempfile.mkdtemp(prefix="ptl-report-scale-"))
    rows = [measure("default shape", default_shape_run(), base / "small", chromium),
            measure("full.toml shape", matrix_run(), base / "large", chromium)]
    print(f"{'run':<16} {'cells':>5} {'render s':>9} {'overview KiB':>13} "
          f"{'cell pages':>10} {'load ms':>8}")
    for r in rows:
        print(f"{r['run']:<16} {r['cells']:>5} {r['render_s']:>9.1f} {r['overview_kb']:>13.0f} "
              f"{r['cell_pages']:>10} {r['load_ms'] if r['load_ms'] is not None else '-':>8}")
    large = rows[-1]["load_ms"]
    if large is not None:
        print(f"large report's load: {large} ms, goal under {LOAD_GOAL_MS} ms: "
              + ("met" if large < LOAD_GOAL_MS else "NOT met"))
    if args.out is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if large is None or large < LOAD_GOAL_MS else 1


if __name__ == "__main__":
    sys.exit(main())
