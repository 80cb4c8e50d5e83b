"""``ptlab run``: an experiment spec, every cell of its matrix, results and report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netns.sh import require_root, require_tools

from .common import (
    DEFAULT_SPEC,
    EXIT_HELP,
    EXIT_OK,
    EXIT_USAGE,
    REPO,
    Subparsers,
    die,
    load_run_spec,
    make_quick,
    new_run_dir,
    run_exit_status,
    term_to_exit,
    wide_console,
    write_junit,
)

if TYPE_CHECKING:
    from ..experiment.spec import Spec


def cmd_run(args: argparse.Namespace) -> int:
    from ..experiment.run import run_experiment

    spec = load_run_spec(args.spec)
    if args.check:
        return check_spec(spec, args.json)
    for warning in spec.warnings if not args.quick else []:
        print(f"ptlab: warning: {warning}", file=sys.stderr)
    if args.quick:
        make_quick(spec)
    require_root()
    require_tools("ip", "nft", "tc", "tcpdump")
    out = Path(args.results) if args.results else new_run_dir()
    console = wide_console()
    term_to_exit()
    outcome = run_experiment(spec, out, console=console, lab_id=args.lab_id)
    console.print(f"report: [bold]{outcome.report}[/]")
    write_junit(outcome, spec, args.junit)
    return run_exit_status(outcome)


def check_report(spec: Spec) -> dict[str, Any]:
    """What ``ptlab run --check`` finds, found without a lab: a SpecError for what a
    run would refuse; otherwise the cells it would run, the warnings, and the rows
    the tools found here cannot run."""
    from censor_sim.profile import ProfileError, load_profile

    from ..common.specfile import SpecError
    from ..experiment.scoring import BASELINE

    rows = spec.rows()
    for row in rows:
        row.check()
        row.check_installed()
    for column in spec.censors:
        profile, overrides = spec.censor_profile(column)
        try:
            load_profile(profile, overrides)
        except ProfileError as exc:
            raise SpecError(f"censors.{column}: {exc}") from None
    # Rows the tools found here cannot run: said now, not discovered mid-run.
    skipped, warnings = {}, list(spec.warnings)
    for row in rows:
        try:
            reason = row.plugin.skip_reason()
        except OSError as exc:
            warnings.append(f"transports.{row.name}: {exc}")
            continue
        if reason:
            skipped[row.name] = reason
    matrix = len(spec.transports) * len(spec.censors)
    # The no-censor baseline runs for every row, as a cell of its own unless the
    # spec has the none column already.
    baselines = 0 if BASELINE in spec.censors else len(spec.transports)
    return {"spec": str(spec.path), "ok": True, "transports": list(spec.transports),
            "censors": list(spec.censors), "matrix_cells": matrix,
            "baseline_cells": baselines, "cells": matrix + baselines,
            "repetitions": spec.repetitions, "settings": spec.settings(),
            "warnings": warnings, "skipped": skipped}


def check_spec(spec: Spec, as_json: bool = False) -> int:
    """``ptlab run --check``: one line per finding, or one JSON object."""
    from ..common.specfile import SpecError

    try:
        report = check_report(spec)
    except SpecError as exc:
        if as_json:
            print(json.dumps({"spec": str(spec.path), "ok": False, "error": str(exc)}))
            return EXIT_USAGE
        return die(f"{spec.path}: {exc}")
    if as_json:
        print(json.dumps(report, indent=1))
        return EXIT_OK
    extra = (f" (+{report['baseline_cells']} no-censor baselines)"
             if report["baseline_cells"] else "")
    print(f"{spec.path}: ok: {len(spec.transports)} transports x {len(spec.censors)} censors "
          f"= {report['matrix_cells']} cells{extra}, {spec.repetitions} repetitions each")
    for warning in report["warnings"]:
        print(f"warning: {warning}")
    for name, reason in report["skipped"].items():
        print(f"skipped: transports.{name}: {reason}")
    return EXIT_OK


def add_parser(sub: Subparsers) -> None:
    r = sub.add_parser("run", help="run an experiment spec (transports x censors)",
                       description="Run an experiment: bring a lab up, run every cell of "
                                   "the transports x censors matrix, write results/<ts>/.",
                       epilog=EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("spec", nargs="?", default=str(DEFAULT_SPEC),
                   help=f"experiment TOML (default: {DEFAULT_SPEC.relative_to(REPO)})")
    r.add_argument("--results", help="results directory (default: results/<timestamp> "
                                     "under the current directory)")
    r.add_argument("--quick", action="store_true",
                   help="one repetition and a small bulk size (CI's quick form)")
    r.add_argument("--lab-id", help="lab id to use (1-4 of a-z0-9; default random)")
    r.add_argument("--junit", metavar="FILE",
                   help="also write the cells as JUnit XML, one test case each (for CI)")
    r.add_argument("--json", action="store_true", help="--check: print one JSON object")
    r.add_argument("--check", action="store_true",
                   help="validate the spec, its transports' options and its censors' "
                        "overrides, then exit (no lab, no root)")
    r.set_defaults(fn=cmd_run)
