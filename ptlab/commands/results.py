"""``ptlab report`` and ``ptlab compare``: what a finished run, or several, show."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import Subparsers, die, results_root


def cmd_compare(args: argparse.Namespace) -> int:
    from ..output.compare import comparison_json, run

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
    if args.json:
        print(json.dumps([comparison_json(c) for c in comparisons], indent=1, default=str))
    else:
        print(text, end="")
    if args.html:
        print(f"html: {args.html}")
    changed = any(c.status_changes for c in comparisons)
    return 1 if args.fail_on_change and changed else 0


def cmd_runs(args: argparse.Namespace) -> int:
    """``ptlab runs``: the runs under a results directory, newest first."""
    from ..output.runindex import find_runs, runs_json, runs_text, write_index

    root = Path(args.root) if args.root else results_root()
    if not root.is_dir():
        return die(f"{root}: no such results directory")
    runs = find_runs(root)
    print(runs_json(runs) if args.json else runs_text(runs), end="")
    if args.index:
        print(f"index: {write_index(root)}", file=sys.stderr)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """``ptlab merge DIR… --out OUT``: shards of one run joined into one."""
    from ..experiment.merge import merge_into
    from ..output.report import render_report
    from ..output.runindex import write_index

    out = Path(args.out)
    results = merge_into([Path(d) for d in args.runs], out, args.force)
    print(f"merged {len(args.runs)} shards: {len(results.rows)} cells in {out}")
    print(f"report: {render_report(out)}")
    write_index(out.resolve().parent)
    return 0


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
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp.set_defaults(fn=cmd_compare)

    merge = sub.add_parser("merge", help="join the shards of one run (run --shard K/N)",
                           description="Join the results of 'ptlab run --shard K/N' jobs "
                                       "into one results directory, with its report. The "
                                       "shards must have run the same spec with the same "
                                       "settings and code, and no cell twice.")
    merge.add_argument("runs", nargs="+", metavar="DIR", help="the shards' results")
    merge.add_argument("--out", required=True, help="the merged results directory")
    merge.add_argument("--force", action="store_true",
                       help="merge even if the spec, settings or code differ")
    merge.set_defaults(fn=cmd_merge)

    runs = sub.add_parser("runs", help="list the runs under a results directory",
                          description="List every run under a results directory, newest "
                                      "first: when it ran, its spec, its cells and how they "
                                      "came out (k/n), and the git SHA that ran it.")
    runs.add_argument("root", nargs="?", help="results directory (default: ./results)")
    runs.add_argument("--json", action="store_true", help="print JSON records instead")
    runs.add_argument("--index", action="store_true",
                      help="also rewrite ROOT/index.html, which links every run's report")
    runs.set_defaults(fn=cmd_runs)

    rep = sub.add_parser("report", help="render report.html for a results directory",
                         description="Print a run's results table and (re)write its "
                                     "report.html from results.json, e.g. after upgrading "
                                     "ptlab or to render a run copied from elsewhere.")
    rep.add_argument("results_dir", help="a directory ptlab run wrote (holds results.json)")
    rep.set_defaults(fn=cmd_report)
