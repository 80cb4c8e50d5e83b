"""``ptlab export``: an experiment written for another engine (Shadow)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import Subparsers, die


def cmd_export_shadow(args: argparse.Namespace) -> int:
    from ..export.scalespec import load_scale_spec
    from ..export.shadow import build, shadowtools_check, write

    spec = load_scale_spec(Path(args.spec))
    try:
        path = write(spec, Path(args.out), args.python)
    except ValueError as exc:
        return die(str(exc))
    why = shadowtools_check(build(spec, Path(args.out), args.python))
    hosts = json.loads(path.read_text().split("\n", 1)[1])["hosts"]
    print(f"shadow: {path} ({len(hosts)} hosts, "
          f"{sum(len(h['processes']) for h in hosts.values())} processes); "
          f"Shadow's own types: {why or 'valid'}")
    return 0


def add_parser(sub: Subparsers) -> None:
    exp = sub.add_parser("export", help="write an experiment for another engine",
                         description="Export a scale spec to another engine (Shadow).")
    esub = exp.add_subparsers(dest="export_command", required=True)
    sh = esub.add_parser("shadow", help="write OUT/shadow.yaml for the Shadow simulator")
    sh.add_argument("spec", help="scale spec, e.g. experiments/snowflake-scale.toml")
    sh.add_argument("out", help="output directory")
    sh.add_argument("--python", help="the Python that Shadow hosts run (default: this one)")
    sh.set_defaults(fn=cmd_export_shadow)
