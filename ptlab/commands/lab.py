"""``ptlab lab``: bring the default topology up, take labs down, look inside."""

from __future__ import annotations

import argparse
import os
import time

from netns import cleanup
from netns.lab import Lab
from netns.sh import require_root, require_tools
from netns.topology import default_topology

from .common import Subparsers, die


def cmd_lab_up(args: argparse.Namespace) -> int:
    require_root()
    require_tools("ip")
    lab = Lab(default_topology(args.proxies), args.id)
    t0 = time.monotonic()
    lab.up(detached=True)
    print(f"lab {lab.id} is up ({len(lab.topology.nodes)} namespaces, "
          f"{time.monotonic() - t0:.1f} s); 'ptlab lab down {lab.id}' removes it")
    for role in lab.topology.nodes:
        print(f"  {lab.ns(role):24s} {lab.addr(role):15s} {lab.addr(role, v6=True)}")
    return 0


def cmd_lab_down(args: argparse.Namespace) -> int:
    require_root()
    require_tools("ip")
    if args.all:
        ids = cleanup.down_all()
    elif args.id:
        if args.id not in cleanup.all_lab_ids():
            return die(f"no lab {args.id!r} ('ptlab lab status' lists them)")
        cleanup.down(args.id)
        ids = [args.id]
    else:
        ids = cleanup.down_orphans()
    print(f"removed {len(ids)} lab(s){': ' + ', '.join(ids) if ids else ''}")
    return 0


def cmd_lab_status(args: argparse.Namespace) -> int:
    require_root()
    require_tools("ip")
    ids = sorted(cleanup.all_lab_ids())
    if not ids:
        print("no labs")
    for i in ids:
        st = cleanup.status(i)
        owner = f"owner pid {st.owner_pid}" if st.owner_pid else "no owner"
        print(f"{i}: {st.state}, {st.namespaces} namespaces, {owner}")
    return 0


def cmd_lab_exec(args: argparse.Namespace) -> int:
    require_root()
    lab_id = args.id
    if lab_id is None:
        ids = sorted(cleanup.all_lab_ids())
        if len(ids) != 1:
            return die("several labs (or none) are up: name one with --id")
        lab_id = ids[0]
    lab = Lab.attach(lab_id)
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not cmd:
        return die("nothing to run: ptlab lab exec NODE -- CMD")
    ns = lab.ns(args.node)
    os.execvp("ip", ["ip", "netns", "exec", ns, *cmd])
    return 0  # not reached


def add_parser(sub: Subparsers) -> None:
    lab = sub.add_parser("lab", help="manage labs (namespaces)",
                         description="Bring the default topology up, down, or look inside.")
    lsub = lab.add_subparsers(dest="lab_command", required=True)
    up = lsub.add_parser("up", help="bring the default topology up and return",
                         description="Bring the default topology up as namespaces and "
                                     "return: the lab outlives the command (its owner is "
                                     "'detached') until 'ptlab lab down ID'.")
    up.add_argument("--id", help="lab id (default random)")
    up.add_argument("--proxies", type=int, default=2, help="number of proxy namespaces")
    up.set_defaults(fn=cmd_lab_up)
    down = lsub.add_parser("down", help="remove orphaned labs, one lab (ID) or all (--all)",
                           description="Remove labs: with no argument, the orphans (labs "
                                       "whose owner died, e.g. a killed run); with ID, that "
                                       "lab even if its owner lives; with --all, every lab. "
                                       "Namespaces, interfaces, processes and state go.")
    down.add_argument("id", nargs="?", help="lab id to remove even if its owner lives")
    down.add_argument("--all", action="store_true", help="remove every lab")
    down.set_defaults(fn=cmd_lab_down)
    st = lsub.add_parser("status", help="list labs and their owners",
                         description="List every ptl lab on this machine: its id, its "
                                     "owner process and whether that owner is alive "
                                     "(an orphan is what ptlab lab down removes).")
    st.set_defaults(fn=cmd_lab_status)
    ex = lsub.add_parser("exec", help="run a command in a lab node: lab exec NODE -- CMD",
                         description="Run a command in one node's namespace of a running "
                                     "lab, e.g. 'ptlab lab exec censor -- nft list "
                                     "ruleset'.")
    ex.add_argument("--id", help="lab id (needed when several labs are up)")
    ex.add_argument("node", help="node role, e.g. client, censor, bridge")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command and arguments")
    ex.set_defaults(fn=cmd_lab_exec)
