"""``ptlab list``: what a spec may name (lab rows, censor profiles, workloads)."""

from __future__ import annotations

import argparse

from .common import Subparsers


def cmd_list(args: argparse.Namespace) -> int:
    """What a spec may name: transports (lab rows), censor profiles, workloads."""
    if args.what == "transports":
        from .. import plugins

        names = plugins.available()
        width = max(map(len, names))
        for name in names:
            print(f"{name:<{width}}  {plugins.get(name).description}")
    elif args.what == "profiles":
        from censor_sim.profile import available, load_profile

        for name in available():
            prof = load_profile(name)
            print(f"{name}\n    {' '.join(prof.description.split())}\n"
                  f"    source: {' '.join(prof.source.split())}")
    else:
        from ..workloads import CATALOGUE

        for name, (what, keys) in CATALOGUE.items():
            print(f"{name:<10} {what}\n{'':<10} [workloads] {keys}")
    return 0


def add_parser(sub: Subparsers) -> None:
    ls = sub.add_parser("list", help="list transports, censor profiles or workloads",
                        description="List what an experiment spec may name: the lab's "
                                    "transport rows, the censor profiles (each with the "
                                    "source it reproduces) or the workloads.")
    ls.add_argument("what", choices=("transports", "profiles", "workloads"))
    ls.set_defaults(fn=cmd_list)
