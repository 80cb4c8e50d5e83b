"""``python -m censor_sim.prober HOST PORT``: run the Frolov probe suite at one endpoint.

Prints one line per probe and a verdict (``--json``: one JSON object per line, the
last with ``"verdict"``). All probes run concurrently, so a run takes about
``--watch`` seconds when the server never closes. The default watch is the
paper's 300 s TIMEOUT (Frolov et al., NDSS 2020, §V).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from collections.abc import Callable
from typing import NoReturn

from .observe import run_suite
from .probes import FROLOV_RANDOM_SIZES, frolov_suite
from .sources import SourcePool
from .verdict import looks_like, summarize

PROG = "python -m censor_sim.prober"


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr, as the process contract asks."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"prober: {message}\n")


def _positive(kind: type[float] | type[int]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
        return value
    return parse


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text!r}")
    return int(text)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of sizes: {text!r}") from None
    if not sizes or any(s <= 0 for s in sizes) or len(set(sizes)) != len(sizes):
        raise argparse.ArgumentTypeError(f"sizes must be distinct and positive: {text!r}")
    return sizes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog=PROG, description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("host")
    p.add_argument("port", type=_port)
    p.add_argument("--watch", type=_positive(float), default=300.0,
                   help="seconds to wait for a close after connecting (default 300)")
    p.add_argument("--seed", type=int, default=0, help="seed for random bytes (default 0)")
    p.add_argument("--sizes", type=_sizes, default=list(FROLOV_RANDOM_SIZES),
                   help="random probe sizes, comma separated (default: the paper's)")
    p.add_argument("--connect-timeout", type=_positive(float), default=5.0)
    p.add_argument("--concurrency", type=_positive(int), default=16)
    p.add_argument("--json", action="store_true", help="JSON lines output")
    return p.parse_args(argv)


def serve_main(argv: list[str]) -> int:
    """``serve --listen HOST:PORT``: the probe service the censor calls (service.py)."""
    from .service import serve

    p = _Parser(prog=f"{PROG} serve", description="Run the probe service.")
    p.add_argument("--listen", required=True, help="HOST:PORT to listen on")
    p.add_argument("--sources", default="",
                   help="prefixes this node owns (one IPv4, one IPv6, comma separated): "
                        "each probe connection comes from a random address in them")
    p.add_argument("--seed", type=int, default=0, help="seed for the source addresses")
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    try:
        pool = SourcePool([x for x in args.sources.split(",") if x.strip()], args.seed)
    except ValueError as exc:
        print(f"prober: --sources: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(host.strip("[]"), _port(port), pool=pool or None))
    except argparse.ArgumentTypeError as exc:
        print(f"prober: --listen: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"prober: cannot listen on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return serve_main(argv[1:])
    args = parse_args(argv)
    try:
        socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        print(f"prober: cannot resolve {args.host!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    probes = frolov_suite(args.seed, args.sizes)
    try:
        results = asyncio.run(run_suite(args.host, args.port, probes, args.watch,
                                        args.concurrency, args.connect_timeout))
    except KeyboardInterrupt:
        print("prober: interrupted", file=sys.stderr)
        return 130
    if args.json:
        for r in results:
            print(json.dumps(r.to_json()), flush=True)
        print(json.dumps(summarize(results)), flush=True)
    else:
        for r in results:
            when = "-" if r.close_after_s is None else f"{r.close_after_s:.3f}s"
            extra = f"  ({r.error})" if r.error else ""
            print(f"{r.probe:<10} sent={r.sent:<6} data={r.response_len:<6} "
                  f"{r.close:<8} {when}{extra}")
        s = summarize(results)
        at = f" at {s['fin_threshold_s']} s" if s["fin_threshold_s"] is not None else ""
        print(f"verdict: {looks_like(results)}{at}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
