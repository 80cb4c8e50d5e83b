"""``ptlab report`` and ``ptlab compare``: what a finished run, or several, show."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import Subparsers, die


def cmd_compare(args: argparse.Namespace) -> int:
    from ..output.compare import run

    if len(args.runs) < 2:
        return die("compare needs at least two results directories")
    dirs = [Path(d) for d in args.runs]
    for d in dirs:
        if not (d / "results.json").exists():
            return die(f"{d}: no results.json there")
    try:
        text, comparisons = run(dirs, Path(args.html) if args.html else None)
    except ValueError as exc:
        return die(str(exc))
    print(text, end="")
    if args.html:
        print(f"html: {args.html}")
    changed = any(c.status_changes for c in comparisons)
    return 1 if args.fail_on_change and changed else 0


def cmd_report(args: argparse.Namespace) -> int:
    from ..common.results import load_results
    from ..output.report import render_report
    from ..output.terminal import print_results

    d = Path(args.results_dir)
    if not (d / "results.json").exists():
        return die(f"{d}: no results.json there")
    print_results(load_results(d))
    print(f"report: {render_report(d)}")
    return 0


def add_parser(sub: Subparsers) -> None:
    cmp = sub.add_parser("compare", help="compare runs cell by cell",
                         description="Compare each later run with the first: status and "
                                     "goodput cell by cell (goodput as a ratio with a "
                                     "95 % interval), then the spec and provenance "
                                     "differences.")
    cmp.add_argument("runs", nargs="+", metavar="RUN", help="results directories (2 or more)")
    cmp.add_argument("--html", help="also write the comparison as an HTML page here")
    cmp.add_argument("--fail-on-change", action="store_true",
                     help="exit 1 if any cell changed status (for CI)")
    cmp.set_defaults(fn=cmd_compare)

    rep = sub.add_parser("report", help="render report.html for a results directory",
                         description="Print a run's results table and (re)write its "
                                     "report.html from results.json, e.g. after upgrading "
                                     "ptlab or to render a run copied from elsewhere.")
    rep.add_argument("results_dir", help="a directory ptlab run wrote (holds results.json)")
    rep.set_defaults(fn=cmd_report)
