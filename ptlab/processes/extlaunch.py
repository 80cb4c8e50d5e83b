"""Run an external tool and say when it is ready: ``python -m ptlab.processes.extlaunch``.

Tools such as ss-server print nothing the lab could wait for, so this launcher
runs the tool (its output goes to the same log), checks until it is ready, and
then writes the lab's ``ready`` event. The checks, one per launch:

* ``--ready-port HOST:PORT``: the TCP port accepts a connection;
* ``--ready-udp HOST:PORT``: the tool's own process (or a child of it) has a
  UDP socket bound to PORT, on HOST or on every address. A UDP server answers
  nothing it cannot authenticate, so a probe packet would tell nothing; the
  bound socket, read from ``/proc/net/udp`` in the tool's namespace and matched
  to the tool's sockets by inode, is what "listening" means for UDP;
* ``--ready-dev DEV``: a VPN's tun device is up with an address;
* ``--ready-cmd COMMAND``: a probe the row names exits 0.

SIGTERM and SIGINT are passed on to the tool; the launcher exits with the
tool's status. Used by bring-your-own-tool rows (ptlab.plugins.external,
docs/lab/transports.md §7.2).

``python -m ptlab.processes.extlaunch (--ready-port | --ready-udp) HOST:PORT |
--ready-dev DEV | --ready-cmd COMMAND [--component NAME] -- CMD...``
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ptcommon.events import EventLog
from transports.common.hostport import split_hostport

from .tunroute import device_ready

PROC = Path("/proc")
# /proc/net/udp's state column for an unconnected, bound socket (TCP_CLOSE, 7): a
# UDP server's socket is in it whether or not it has exchanged a datagram.
UDP_UNCONNECTED = 7


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def udp_sockets(proc: Path = PROC) -> Iterator[tuple[str, int, int]]:
    """(local address, port, inode) of each unconnected UDP socket in this process's
    network namespace (/proc/net/udp and udp6)."""
    for name, family in (("udp", socket.AF_INET), ("udp6", socket.AF_INET6)):
        try:
            lines = (proc / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or int(fields[3], 16) != UDP_UNCONNECTED:
                continue
            addr_hex, _, port_hex = fields[1].partition(":")
            yield _proc_address(addr_hex, family), int(port_hex, 16), int(fields[9])


def _proc_address(hex_addr: str, family: int) -> str:
    """The kernel prints an address as 32-bit words, each in the host's byte order."""
    words = [int(hex_addr[i:i + 8], 16) for i in range(0, len(hex_addr), 8)]
    return socket.inet_ntop(family, struct.pack(f"={len(words)}I", *words))


def process_tree(root: int, proc: Path = PROC) -> set[int]:
    """``root`` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for d in proc.glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo += children.get(pid, [])
    return tree


def socket_inodes(pids: set[int], proc: Path = PROC) -> set[int]:
    """The inodes of the sockets these processes hold open."""
    inodes = set()
    for pid in pids:
        try:
            fds = list((proc / str(pid) / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def udp_bound(host: str, port: int, pid: int, proc: Path = PROC) -> bool:
    """Whether process ``pid`` (or a descendant) has a UDP socket bound to ``port``
    on ``host`` or on the wildcard address."""
    want = ipaddress.ip_address(host)
    candidates = set()
    for addr, p, inode in udp_sockets(proc):
        if p != port:
            continue
        ip = ipaddress.ip_address(addr)
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        if ip.is_unspecified or ip == want or mapped == want:
            candidates.add(inode)
    # Whose sockets they are only matters once the port is bound at all.
    return bool(candidates) and bool(candidates & socket_inodes(process_tree(pid, proc), proc))


def probe_passes(cmd: list[str], timeout: float) -> bool:
    """Whether the row's probe command exits 0 within ``timeout`` (its output is
    dropped: the log is the tool's)."""
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def readiness_check(args: argparse.Namespace, child: subprocess.Popen[bytes]
                    ) -> tuple[Callable[[], bool], str]:
    """The check the arguments ask for, and what it watches (for the ready event)."""
    if args.ready_port:
        host, port = split_hostport(args.ready_port)
        return (lambda: port_open(host, port)), f"tcp {args.ready_port}"
    if args.ready_udp:
        host, port = split_hostport(args.ready_udp)
        return (lambda: udp_bound(host, port, child.pid)), f"udp {args.ready_udp}"
    if args.ready_dev:
        return (lambda: device_ready(args.ready_dev)), args.ready_dev
    probe = shlex.split(args.ready_cmd)
    return (lambda: probe_passes(probe, args.probe_timeout)), args.ready_cmd


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ptlab.processes.extlaunch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    ready = p.add_mutually_exclusive_group(required=True)
    ready.add_argument("--ready-port", help="HOST:PORT that accepts a TCP connection when ready")
    ready.add_argument("--ready-udp",
                       help="HOST:PORT: ready when the tool has a UDP socket bound there")
    ready.add_argument("--ready-dev",
                       help="a network device that is up with an IPv4 address when ready")
    ready.add_argument("--ready-cmd", help="a command (one shell-quoted string) that exits 0 "
                                           "when the tool is ready")
    p.add_argument("--probe-timeout", type=float, default=2.0,
                   help="seconds one run of --ready-cmd may take (default 2)")
    p.add_argument("--component", default="external", help="the events' component name")
    p.add_argument("--interval", type=float, default=0.1,
                   help="seconds between checks (default 0.1)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the tool's command line")
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command after --")
    for flag in ("ready_port", "ready_udp"):
        if getattr(args, flag):
            try:
                split_hostport(getattr(args, flag))
            except ValueError as exc:
                p.error(f"--{flag.replace('_', '-')}: {exc}")
    if args.ready_cmd is not None:
        try:
            if not shlex.split(args.ready_cmd):
                p.error("--ready-cmd: empty command")
        except ValueError as exc:
            p.error(f"--ready-cmd: {exc}")
    events = EventLog(args.component)
    try:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"{args.component}: cannot run {cmd[0]}: {exc}", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    is_ready, on = readiness_check(args, child)
    while child.poll() is None:
        if is_ready():
            events.ready(pid=child.pid, on=on)
            break
        time.sleep(args.interval)
    status = child.wait()
    events.emit("exited", status=status)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    raise SystemExit(main())
