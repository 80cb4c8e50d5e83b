"""``ptlab censor``: one censor profile on this host's interfaces, or over a capture."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netns.sh import require_root, require_tools

from .common import Subparsers, die, term_to_exit

if TYPE_CHECKING:
    from censor_sim.offline import FlowVerdict


def set_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``--set``'s profile overrides; ValueError says what is wrong."""
    try:
        overrides = json.loads(args.set) if args.set else {}
    except ValueError as exc:
        raise ValueError(f"--set: not JSON: {exc}") from None
    if not isinstance(overrides, dict):
        raise ValueError("--set: expected a JSON object of profile overrides")
    return overrides


def _line_encoder() -> Any:
    """One verdict as a compact JSON line: orjson's text where it writes the same,
    the standard library's otherwise (censor_sim/eventjson.py)."""
    from censor_sim import eventjson

    def encode(fv: FlowVerdict) -> str:
        record = fv.to_json()
        line = (eventjson.encode(record, no_floats=fv.holds_no_float())
                if eventjson.orjson is not None else None)
        if line is None:
            line = json.dumps(record, separators=(",", ":"))
        return line + "\n"

    return encode


def censor_pcap(args: argparse.Namespace) -> int:
    """``ptlab censor --profile P --pcap F``: the engine over a capture (docs/lab/censor.md)."""
    from censor_sim.offline import replay
    from censor_sim.pcapflows import PcapError
    from censor_sim.profile import ProfileError, load_profile
    from ptcommon import gcpolicy

    try:
        profile = load_profile(args.profile, set_overrides(args))
        out = open(args.out, "w") if args.out else sys.stdout  # noqa: SIM115
    except (ValueError, ProfileError, OSError) as exc:
        return die(f"censor --pcap: {exc}")
    gcpolicy.for_packet_loop()
    encode = _line_encoder()
    flows = flagged = midstream = 0
    try:
        live = args.pcap == "-"  # a capture still being taken: each line as it comes
        for fv in replay(profile, Path(args.pcap), args.clients, args.seed):
            out.write(encode(fv))
            if live:
                out.flush()
            flows += 1
            flagged += fv.verdict != "pass"
            midstream += fv.midstream and fv.verdict == "pass"
    except BrokenPipeError:
        raise  # `ptlab censor --pcap F | head`: the reader left (main handles it)
    except (PcapError, ValueError, OSError) as exc:
        return die(f"censor --pcap: {exc}")
    finally:
        if out is not sys.stdout:
            out.close()
    unjudged = (f"; {midstream} TCP flows passed unjudged, first seen mid-stream (the "
                "capture holds no SYN from their client)" if midstream else "")
    print(f"{profile.name}: {flagged} of {flows} flows acted on{unjudged}", file=sys.stderr)
    return 0


def cmd_censor(args: argparse.Namespace) -> int:
    """Run one censor profile on real interfaces, outside any lab (a VM router, say)."""
    if args.pcap:
        return censor_pcap(args)  # before the live censor's imports: 50 ms of a run
    import asyncio

    from censor_sim.datapath import DatapathError
    from censor_sim.profile import ProfileError
    from censor_sim.service import run as run_censor
    if not args.inside or not args.outside:
        return die("--inside and --outside are needed (or --pcap to judge a capture)")
    require_root()
    require_tools("nft", "iptables")
    for iface in (args.inside, args.outside):
        if not Path(f"/sys/class/net/{iface}").exists():
            return die(f"no interface {iface!r} in this network namespace")
    if args.inside == args.outside:
        return die("--inside and --outside must be different interfaces")
    try:
        overrides = set_overrides(args)
    except ValueError as exc:
        return die(str(exc))
    if Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() != "1":
        print("ptlab: warning: net.ipv4.ip_forward is 0, so this host forwards nothing",
              file=sys.stderr)
    config = {"profile": args.profile, "overrides": overrides, "inside": args.inside,
              "outside": args.outside, "seed": args.seed}
    if args.prober:
        config["prober"] = args.prober
    term_to_exit()
    try:
        asyncio.run(run_censor(config, poll=0.2))
    except (ProfileError, DatapathError, ValueError) as exc:
        return die(f"censor: {exc}")
    except KeyboardInterrupt:
        return 0
    return 0


def add_parser(sub: Subparsers) -> None:
    cen = sub.add_parser("censor", help="run a censor profile on real interfaces or a pcap",
                         description="Run one censor profile on this host's interfaces "
                                     "(for example on a VM router) until SIGINT/SIGTERM; "
                                     "events go to stdout as JSON lines. With --pcap, run "
                                     "it over a capture instead: no root, no network, one "
                                     "JSON line per flow.")
    cen.add_argument("--profile", required=True, help="profile name or path to a .toml")
    cen.add_argument("--inside", help="interface toward the censored users")
    cen.add_argument("--outside", help="interface toward the rest of the world")
    cen.add_argument("--pcap", help="a capture to judge offline: pcap (tcpdump -w) or "
                     "pcapng (Wireshark, dumpcap); - reads standard input")
    cen.add_argument("--out", help="--pcap: write the verdicts here (default stdout)")
    cen.add_argument("--clients", action="append", default=[], metavar="CIDR",
                     help="--pcap: the censored users' addresses (default: whoever opened "
                          "each flow); repeatable")
    cen.add_argument("--set", help='profile overrides as JSON, e.g. \'{"actions": '
                                   '{"residual": {"seconds": [10]}}}\'')
    cen.add_argument("--seed", type=int, default=0, help="seed of the censor's RNG")
    cen.add_argument("--prober", help="HOST:PORT of a probe service (python -m "
                                      "censor_sim.prober serve)")
    cen.set_defaults(fn=cmd_censor)
