"""The ``ptlab`` command line: the command groups of :mod:`ptlab.commands`, assembled.

Every failure a person can cause (not root, a missing system tool, a bad spec
key, an unknown lab) ends in one line on stderr and exit status 2; a run whose
declared expectations fail, or whose bulk check caught corrupted bytes, exits 1
(docs/architecture.md §3.1).
"""

from __future__ import annotations

import argparse
import os
import sys

from netns.errors import LabError

from .commands import censor, export, lab, learning, listing, results, run, transports, vm
from .commands.common import die
from .common.exitcodes import EXIT_INTERRUPTED, EXIT_USAGE
from .common.specfile import SpecError

#: The groups in the order ``ptlab -h`` lists them.
GROUPS = (run, listing, lab, transports, censor, learning, export, vm, results)


def _version() -> str:
    from importlib import metadata  # here: 35 ms that every other command spares

    try:
        return metadata.version("ptlab")
    except metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """argparse's "version" action, with the version looked up only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"{parser.prog} {_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ptlab", description="Censorship-resistance transport lab: real transports "
        "against a simulated censor in Linux network namespaces.",
        epilog="ptlab list transports|profiles|workloads shows what a spec may name; "
               "ptlab run --check SPEC validates a spec without a lab.")
    p.add_argument("--version", action=_VersionAction, nargs=0,
                   help="show program's version number and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["snowflake-proxy"]:  # Go-style single-dash flags: its own parser
        return transports.snowflake_proxy(argv[1:])
    parser = build_parser()
    if not argv:  # a bare `ptlab` asks what it can do
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except (LabError, SpecError) as exc:
        return die(str(exc), getattr(exc, "exit_code", EXIT_USAGE))
    except KeyboardInterrupt:
        return die("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:  # `ptlab list profiles | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
