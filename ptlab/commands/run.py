"""``ptlab run``: an experiment spec, every cell of its matrix, results and report."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from netns.sh import require_root, require_tools

from .common import (
    DEFAULT_SPEC,
    REPO,
    Subparsers,
    die,
    load_run_spec,
    make_quick,
    term_to_exit,
    wide_console,
)

if TYPE_CHECKING:
    from ..experiment.spec import Spec


def cmd_run(args: argparse.Namespace) -> int:
    from ..experiment.run import run_experiment

    spec = load_run_spec(args.spec)
    if args.check:
        return check_spec(spec)
    for warning in spec.warnings if not args.quick else []:
        print(f"ptlab: warning: {warning}", file=sys.stderr)
    if args.quick:
        make_quick(spec)
    require_root()
    require_tools("ip", "nft", "tc", "tcpdump")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.results) if args.results else REPO / "results" / stamp
    console = wide_console()
    term_to_exit()
    outcome = run_experiment(spec, out, console=console, lab_id=args.lab_id)
    console.print(f"report: [bold]{outcome.report}[/]")
    if outcome.integrity_failures:
        for f in outcome.integrity_failures:
            print(f"ptlab: {f}", file=sys.stderr)
        return 1
    if outcome.failed_expectations:
        for f in outcome.failed_expectations:
            print(f"ptlab: expectation failed: {f}", file=sys.stderr)
        return 1
    return 0


def check_spec(spec: Spec) -> int:
    """``ptlab run --check``: everything a run would refuse, found without a lab."""
    from censor_sim.profile import ProfileError, load_profile

    from ..common.specfile import SpecError

    rows = spec.rows()
    for row in rows:
        try:
            row.check()
        except SpecError as exc:
            return die(f"{spec.path}: {exc}")
    for column in spec.censors:
        profile, overrides = spec.censor_profile(column)
        try:
            load_profile(profile, overrides)
        except ProfileError as exc:
            return die(f"{spec.path}: censors.{column}: {exc}")
    cells = len(spec.transports) * len(spec.censors)
    print(f"{spec.path}: ok: {len(spec.transports)} transports x {len(spec.censors)} censors "
          f"= {cells} cells, {spec.repetitions} repetitions each")
    for warning in spec.warnings:
        print(f"warning: {warning}")
    # Rows the tools found here cannot run: said now, not discovered mid-run.
    for row in rows:
        try:
            reason = row.plugin.skip_reason()
        except OSError as exc:
            print(f"warning: transports.{row.name}: {exc}")
            continue
        if reason:
            print(f"skipped: transports.{row.name}: {reason}")
    return 0


def add_parser(sub: Subparsers) -> None:
    r = sub.add_parser("run", help="run an experiment spec (transports x censors)",
                       description="Run an experiment: bring a lab up, run every cell of "
                                   "the transports x censors matrix, write results/<ts>/.")
    r.add_argument("spec", nargs="?", default=str(DEFAULT_SPEC),
                   help=f"experiment TOML (default: {DEFAULT_SPEC.relative_to(REPO)})")
    r.add_argument("--results", help="results directory (default results/<timestamp>)")
    r.add_argument("--quick", action="store_true",
                   help="one repetition and a small bulk size (CI's quick form)")
    r.add_argument("--lab-id", help="lab id to use (1-4 of a-z0-9; default random)")
    r.add_argument("--check", action="store_true",
                   help="validate the spec, its transports' options and its censors' "
                        "overrides, then exit (no lab, no root)")
    r.set_defaults(fn=cmd_run)
