"""``ptlab run``: an experiment spec, every cell of its matrix, results and report."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netns.sh import require_root, require_tools

from ..common.exitcodes import EXIT_OK, EXIT_USAGE
from ..common.specfile import SpecError
from .common import (
    DEFAULT_SPEC,
    EXIT_HELP,
    REPO,
    Subparsers,
    die,
    load_run_spec,
    make_quick,
    new_run_dir,
    no_empty_run_dir,
    results_root,
    run_exit_status,
    term_to_exit,
    wide_console,
    write_junit,
)

if TYPE_CHECKING:
    from ..common.results import Results
    from ..experiment.spec import Spec


def apply_options(spec: Spec, args: argparse.Namespace) -> None:
    """The command line's changes to a spec: --quick, --repetitions and the cell
    selection, each recorded as the option's doing."""
    from ..experiment.selection import Selection, parse_shard

    if args.quick:
        make_quick(spec)
    if args.jobs is not None and not 1 <= args.jobs <= 64:
        raise SpecError("--jobs: must be between 1 and 64")
    if args.repetitions is not None:
        if not 1 <= args.repetitions <= 100:
            raise SpecError("--repetitions: must be between 1 and 100")
        spec.override("experiment.repetitions", args.repetitions, "--repetitions")
    spec.selection = Selection(tuple(args.transport or ()), tuple(args.censor or ()),
                               args.keyword, parse_shard(args.shard) if args.shard else None)
    spec.selection.check(list(spec.transports), list(spec.censors))


def without_errors(prior: Results) -> Results:
    """``--retry-errors``: the run to finish less its ERROR cells, which run again (a
    cell the machine failed, a full disk say, is measured this time)."""
    return dataclasses.replace(prior, rows=[r for r in prior.rows if r.status != "ERROR"])


def resume_from(spec: Spec, directory: Path, force: bool) -> Results:
    """The results of an interrupted run to finish: refused in one line when this run
    would not be the same one (spec, settings, selection, code), unless forced."""
    from ..common.results import git_state, load_results
    from ..experiment.run import run_settings

    try:
        prior = load_results(directory)
    except FileNotFoundError:
        raise SpecError(f"--resume {directory}: no results.json there") from None
    except ValueError as exc:
        raise SpecError(f"--resume {directory}: {exc}") from None
    # What the spec and the command line set; not how the run was spread (run.*).
    settings = {k: v for k, v in run_settings(spec, 1.0)[0].items() if not k.startswith("run.")}
    before = {k: v for k, v in prior.settings.items() if not k.startswith("run.")}
    sha = git_state()[0]
    differences = [what for what, same in (
        ("the spec", prior.spec == spec.raw),
        ("the settings", before == settings),
        ("the cell selection", prior.selection == spec.selection.to_json()),
        (f"the code (it ran {prior.provenance.get('git_sha')}, this is {sha})",
         prior.provenance.get("git_sha") == sha)) if not same]
    if differences and not force:
        what = (differences[0] + " differs" if len(differences) == 1
                else ", ".join(differences[:-1]) + f" and {differences[-1]} differ")
        raise SpecError(f"--resume {directory}: {what} from the run it holds "
                        "(--force resumes anyway)")
    return prior


def cmd_run(args: argparse.Namespace) -> int:
    from ..experiment.run import run_experiment

    spec = load_run_spec(args.spec)
    apply_options(spec, args)
    if args.check:
        return check_spec(spec, args.json)
    for warning in spec.warnings if not args.quick else []:
        print(f"ptlab: warning: {warning}", file=sys.stderr)
    if args.retry_errors and not args.resume:
        return die("--retry-errors goes with --resume DIR")
    prior = resume_from(spec, Path(args.resume), args.force) if args.resume else None
    if prior is not None and args.retry_errors:
        prior = without_errors(prior)
    require_root()
    require_tools("ip", "nft", "tc", "tcpdump")
    out = Path(args.resume or args.results or new_run_dir())
    console = wide_console()
    term_to_exit()
    executor = None
    if args.executor == "dask" or (args.jobs or 1) > 1:
        from ..experiment.executors import DaskExecutor

        if args.executor == "dask" and not args.scheduler:
            return die("--executor dask needs --scheduler tcp://HOST:PORT")
        executor = (DaskExecutor(spec, out, scheduler=args.scheduler)
                    if args.executor == "dask" else DaskExecutor(spec, out, jobs=args.jobs))
    with no_empty_run_dir(out):
        outcome = run_experiment(spec, out, console=console, lab_id=args.lab_id, prior=prior,
                                 executor=executor)
    console.print(f"report: [bold]{outcome.report}[/]")
    write_junit(outcome, spec, args.junit)
    return run_exit_status(outcome)


def check_report(spec: Spec) -> dict[str, Any]:
    """What ``ptlab run --check`` finds, found without a lab: a SpecError for what a
    run would refuse; otherwise the cells it would run, the warnings, and the rows
    the tools found here cannot run."""
    from censor_sim.profile import ProfileError, load_profile

    from ..experiment.cost import LAB_UP_S, estimate
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
    cells = spec.selected_cells()
    # The no-censor baseline runs for every selected row, as a cell of its own
    # unless the selection has that row's none cell already.
    baselines = [t for t in dict.fromkeys(t for t, _ in cells) if (t, BASELINE) not in cells]
    cost = estimate(spec, cells, baselines, results_root())
    if cost.seconds - LAB_UP_S > spec.budget_s:
        # Cells past the budget are not run (status ERROR): said before the run starts.
        # The budget's clock starts once the lab is up; the estimate is serial, so a
        # run spread over labs (--jobs, Dask) may still fit.
        warnings.append(f"the estimate is past experiment.budget_s ({spec.budget_s:.0f} s): "
                        "cells past the budget would not run (ERROR); raise budget_s, "
                        "select fewer cells or repetitions, or spread the run (--jobs)")
    return {"spec": str(spec.path), "ok": True, "transports": list(spec.transports),
            "censors": list(spec.censors), "matrix_cells": len(spec.cells()),
            "selected_cells": len(cells), "baseline_cells": len(baselines),
            "cells": len(cells) + len(baselines), "selection": spec.selection.to_json(),
            "repetitions": spec.repetitions, "settings": spec.settings(),
            "estimated_seconds": round(cost.seconds, 1),
            "estimated_from": {"earlier_runs": cost.from_history,
                               "workloads": cost.from_workloads},
            "estimate": cost.text(), "warnings": warnings, "skipped": skipped}


def check_spec(spec: Spec, as_json: bool = False) -> int:
    """``ptlab run --check``: one line per finding, or one JSON object."""
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
    chosen = ("" if spec.selection.is_all
              else f"; {report['selected_cells']} selected")
    print(f"{spec.path}: ok: {len(spec.transports)} transports x {len(spec.censors)} censors "
          f"= {report['matrix_cells']} cells{chosen}{extra}, {spec.repetitions} "
          "repetitions each")
    print(report["estimate"])
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
    r.add_argument("-t", "--transport", action="append", metavar="ROW",
                   help="run only this row (repeatable)")
    r.add_argument("-c", "--censor", action="append", metavar="COLUMN",
                   help="run only this censor column (repeatable)")
    r.add_argument("-k", dest="keyword", metavar="EXPR",
                   help="run only the cells whose names match, as pytest's -k: names "
                        "joined by and/or/not, each a substring of the row, the column, "
                        "its profile or ROW-COLUMN")
    r.add_argument("--repetitions", type=int, metavar="N",
                   help="repetitions per cell, instead of the spec's")
    r.add_argument("--shard", metavar="K/N",
                   help="run only shard K of N of the selected cells (a job array's "
                        "part; 'ptlab merge' joins the shards' results)")
    r.add_argument("--resume", metavar="DIR",
                   help="finish the interrupted run in DIR: only the cells it lacks")
    r.add_argument("--force", action="store_true",
                   help="--resume even if the spec, settings, selection or code differ")
    r.add_argument("--retry-errors", action="store_true",
                   help="--resume: run DIR's ERROR cells again too (the machine failed "
                        "them, not the transport)")
    r.add_argument("--jobs", type=int, metavar="N",
                   help="run N labs at once on this machine, each with its own id and "
                        "namespaces (goodput and latency are then marked as measured "
                        "under contention)")
    r.add_argument("--executor", choices=("serial", "dask"), default="serial",
                   help="dask: run the cells on an existing Dask cluster (--scheduler); "
                        "each worker a root machine where scripts/setup ran")
    r.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="the Dask scheduler of --executor dask")
    r.add_argument("--junit", metavar="FILE",
                   help="also write the cells as JUnit XML, one test case each (for CI)")
    r.add_argument("--json", action="store_true", help="--check: print one JSON object")
    r.add_argument("--check", action="store_true",
                   help="validate the spec, its transports' options and its censors' "
                        "overrides, then exit (no lab, no root)")
    r.set_defaults(fn=cmd_run)
