"""Tor's parent role for one pluggable transport, as a lab process.

``python -m ptlab.processes.ptparent server|client --transport NAME ... -- CMD...``
launches a PT in managed mode (ours through ``python -m transports.pt``, or
a real binary such as obfs4proxy), speaks the managed-mode protocol with it,
and publishes what it learned (the SOCKS port of a client; the bind address
and ARGS of a server) as a ``ready`` event and as a JSON file, so the lab
plugin can point workloads at it. The PT's stdin is a pipe kept open for its
lifetime (TOR_PT_EXIT_ON_STDIN_CLOSE=1), and SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ptcommon.events import EventLog
from transports.pt.escaping import SERVER_OPTIONS, EscapeError, escape
from transports.pt.messages import parse_smethod_args


def pt_environment(args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOR_PT_")}
    env.update({
        "TOR_PT_MANAGED_TRANSPORT_VER": "1",
        "TOR_PT_STATE_LOCATION": str(args.state),
        "TOR_PT_EXIT_ON_STDIN_CLOSE": "1",
    })
    if args.role == "client":
        env["TOR_PT_CLIENT_TRANSPORTS"] = args.transport
    else:
        env["TOR_PT_SERVER_TRANSPORTS"] = args.transport
        env["TOR_PT_SERVER_BINDADDR"] = f"{args.transport}-{args.bind}"
        env["TOR_PT_ORPORT"] = args.orport
        if args.option:
            env["TOR_PT_SERVER_TRANSPORT_OPTIONS"] = ";".join(
                f"{args.transport}:{escape(o, SERVER_OPTIONS)}" for o in args.option)
    return env


def parse_method(line: str) -> dict | None:
    """A CMETHOD/SMETHOD line as a dict, or None for other lines (and for an
    SMETHOD whose ARGS end in a lone backslash, which no PT writes)."""
    parts = line.split()
    if not parts:
        return None
    if parts[0] == "CMETHOD" and len(parts) >= 4:
        return {"kind": "client", "transport": parts[1], "proto": parts[2], "addr": parts[3]}
    if parts[0] == "SMETHOD" and len(parts) >= 3:
        args: dict[str, str] = {}
        for p in parts[3:]:
            if p.startswith("ARGS:"):
                try:
                    args.update(parse_smethod_args(p[5:]))
                except EscapeError:
                    return None
        return {"kind": "server", "transport": parts[1], "addr": parts[2], "args": args}
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ptlab.processes.ptparent", description=__doc__)
    p.add_argument("role", choices=("client", "server"))
    p.add_argument("--transport", required=True)
    p.add_argument("--state", type=Path, help="TOR_PT_STATE_LOCATION (default: a temp dir)")
    p.add_argument("--bind", default="0.0.0.0:0", help="server: HOST:PORT to listen on")
    p.add_argument("--orport", default="127.0.0.1:9", help="server: where to relay to")
    p.add_argument("--option", action="append", default=[], help="server: KEY=VALUE option")
    p.add_argument("--info", type=Path, help="write what the PT announced to this JSON file")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for *METHODS DONE")
    p.epilog = "Everything after -- is the PT command and its arguments."
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.cmd = argv[cut + 1:]
    if not args.cmd:
        p.error("no PT command given (after --)")
    events = EventLog(f"ptparent-{args.role}")
    if args.state is None:
        args.state = Path(tempfile.mkdtemp(prefix="ptl-pt-"))
    args.state.mkdir(parents=True, exist_ok=True)
    try:
        child = subprocess.Popen(args.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=sys.stderr, env=pt_environment(args), text=True,
                                 bufsize=1)
    except OSError as exc:
        print(f"ptparent: cannot run {args.cmd[0]}: {exc}", file=sys.stderr)
        return 2
    stop = False

    def on_term(signum, frame) -> None:  # noqa: ARG001
        nonlocal stop
        stop = True
        child.terminate()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    methods: list[dict] = []
    deadline = time.monotonic() + args.timeout
    assert child.stdout is not None
    for line in child.stdout:
        line = line.strip()
        events.emit("pt_line", line=line)
        if (m := parse_method(line)) is not None:
            methods.append(m)
        if line.split(" ", 1)[0].endswith("-ERROR"):
            print(f"ptparent: the PT refused: {line}", file=sys.stderr)
            child.terminate()
            return 1
        if line in ("CMETHODS DONE", "SMETHODS DONE"):
            break
        if time.monotonic() > deadline:
            print("ptparent: the PT did not finish its method lines in time", file=sys.stderr)
            child.terminate()
            return 1
    if not methods:
        print(f"ptparent: the PT offered no {args.transport} method "
              f"(exit status {child.poll()})", file=sys.stderr)
        child.terminate()
        return 1
    info = {"role": args.role, "transport": args.transport, "methods": methods,
            "state": str(args.state), "pid": child.pid}
    if args.info:
        args.info.write_text(json.dumps(info, indent=2))
    events.emit("ready", **info)
    for line in child.stdout:  # keep relaying LOG/STATUS lines as events
        events.emit("pt_line", line=line.strip())
    code = child.wait()
    events.emit("pt_exited", status=code)
    return 0 if stop else (code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
