"""``ptlab list``: what a spec may name (lab rows, censor profiles, workloads)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import Subparsers


def catalogue(what: str) -> list[dict[str, Any]]:
    """What ``ptlab list WHAT`` shows, as records: the same data for people and scripts."""
    if what == "transports":
        from .. import plugins

        return [{"name": n, "description": plugins.get(n).description}
                for n in plugins.available()]
    if what == "profiles":
        from censor_sim.profile import available, load_profile

        out = []
        for name in available():
            prof = load_profile(name)
            out.append({"name": name, "description": " ".join(prof.description.split()),
                        "source": " ".join(prof.source.split())})
        return out
    from ..experiment.spec import Spec
    from ..workloads import CATALOGUE

    defaults = Spec(path=None, name="defaults").settings()
    return [{"name": name, "measures": what_,
             "settings": {key: defaults[f"workloads.{key}"]
                          for key in (k.strip() for k in keys.split(","))}}
            for name, (what_, keys) in CATALOGUE.items()]


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def cmd_list(args: argparse.Namespace) -> int:
    """What a spec may name: transports (lab rows), censor profiles, workloads."""
    records = catalogue(args.what)
    if args.json:
        print(json.dumps(records, indent=1))
    elif args.what == "transports":
        width = max(len(r["name"]) for r in records)
        for r in records:
            print(f"{r['name']:<{width}}  {r['description']}")
    elif args.what == "profiles":
        for r in records:
            print(f"{r['name']}\n    {r['description']}\n    source: {r['source']}")
    else:
        for r in records:
            keys = ", ".join(f"{k} (default {_value(v)})" for k, v in r["settings"].items())
            print(f"{r['name']:<10} {r['measures']}\n{'':<10} [workloads] {keys}")
    return 0


def add_parser(sub: Subparsers) -> None:
    ls = sub.add_parser("list", help="list transports, censor profiles or workloads",
                        description="List what an experiment spec may name: the lab's "
                                    "transport rows, the censor profiles (each with the "
                                    "source it reproduces) or the workloads.")
    ls.add_argument("what", choices=("transports", "profiles", "workloads"))
    ls.add_argument("--json", action="store_true", help="print JSON records instead")
    ls.set_defaults(fn=cmd_list)
