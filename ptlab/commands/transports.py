"""``ptlab pt`` and ``ptlab snowflake-proxy``: the transports as Tor and a Snowflake
volunteer run them, from the base install (no lab extra)."""

from __future__ import annotations

import argparse

from .common import Subparsers


def cmd_pt(args: argparse.Namespace) -> int:
    from transports.pt.managed import main as managed_main

    return managed_main([])


def snowflake_proxy(argv: list[str]) -> int:
    """The proxy takes the Go proxy's single-dash flags, so it parses its own."""
    from transports.snowflake.proxy_cli import main as proxy_main

    return proxy_main(argv)


def add_parser(sub: Subparsers) -> None:
    pt = sub.add_parser("pt", help="run as a Tor pluggable transport (managed mode)",
                        description="Tor PT managed mode: tor (or ptadapter) launches this "
                                    "with TOR_PT_* variables; every registered transport "
                                    "(direct, obfs4, ...) is offered.", add_help=True)
    pt.set_defaults(fn=cmd_pt)

    sub.add_parser("snowflake-proxy", help="run our Snowflake volunteer proxy (see "
                   "ptlab snowflake-proxy -h)", add_help=False,
                   description="Our Snowflake volunteer proxy, with the Go proxy's "
                               "single-dash flags; ptlab snowflake-proxy -h lists them.")
