"""Run an external tool and say when it is ready: ``python -m ptlab.processes.extlaunch``.

Tools such as ss-server print nothing the lab could wait for, so this launcher
runs the tool (its output goes to the same log), polls a TCP port until it
accepts a connection (or, for a VPN, until its tun device is up with an address), and then
writes the lab's ``ready`` event. SIGTERM and SIGINT are passed on to the tool;
the launcher exits with the tool's status.
Used by bring-your-own-tool rows (ptlab.plugins.external).

``python -m ptlab.processes.extlaunch --ready-port HOST:PORT | --ready-dev DEV
[--component NAME] -- CMD...``
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import time

from ptcommon.events import EventLog
from transports.common.hostport import split_hostport

from .tunroute import device_ready


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ptlab.processes.extlaunch", description=__doc__)
    ready = p.add_mutually_exclusive_group(required=True)
    ready.add_argument("--ready-port", help="HOST:PORT that accepts when ready")
    ready.add_argument("--ready-dev",
                       help="a network device that is up with an IPv4 address when ready")
    p.add_argument("--component", default="external", help="the events' component name")
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the tool's command line")
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command after --")
    events = EventLog(args.component)
    if args.ready_port:
        host, port = split_hostport(args.ready_port)

        def is_ready() -> bool:
            return port_open(host, port)
    else:
        def is_ready() -> bool:
            return device_ready(args.ready_dev)
    try:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"{args.component}: cannot run {cmd[0]}: {exc}", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    while child.poll() is None:
        if is_ready():
            events.ready(pid=child.pid, on=args.ready_port or args.ready_dev)
            break
        time.sleep(args.interval)
    status = child.wait()
    events.emit("exited", status=status)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    raise SystemExit(main())
