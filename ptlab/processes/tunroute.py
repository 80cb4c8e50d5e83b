"""Routes for tunnel-mode rows: ``python -m ptlab.processes.tunroute client|server``.

A VPN row (OpenVPN, WireGuard) brings up a tun interface instead of offering a
SOCKS5 front. For its workloads to go through it:

* **client** (client namespace): once the tool's device is up, the workload
  destination (the web server) is routed via the tunnel in a table of its own,
  selected by a policy rule; flows the lab labels as benign (source ports above
  the ephemeral range, and SSH to port 22) keep the main table, so the benign
  mix still runs beside the tunnel as it does beside every other row.
* **server** (bridge namespace): forwarding on, and the tunnel's client
  addresses masqueraded behind the bridge's own, so the web server's answers
  come back to the bridge and into the tunnel.

Both print the lab's ``ready`` event when in place and take everything down
again on SIGTERM (the cell's end), so the next cell finds the namespace as it
was. Their names carry the lab's ``ptl`` prefix. Before the client's routes
go, the connections still bound to the tunnel's address are aborted, while
the tunnel still carries their resets: once the routes are gone, a FIN
retransmitted from such a connection would leave by the main table, with the
tunnel's address as its source, onto the censor's link (a VPN client's kill
switch keeps that traffic in too).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ptcommon.events import EventLog

TABLE = 4201  # the routing table tunnel routes go into
RULE_PRIORITY = 4200
NFT_TABLE = "ptltunnel"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def device_ready(dev: str) -> bool:
    """Whether ``dev`` exists, is up, and has an IPv4 address.

    A tool creates its tun device before it configures it (iodine opens it
    before its DNS login; wireguard-go before ``wg`` and ``ip addr``), and a
    route via the tunnel's far end is refused until the address is there.
    """
    try:
        flags = int(Path(f"/sys/class/net/{dev}/flags").read_text(), 16)
    except (OSError, ValueError):
        return False
    return bool(flags & 0x1) and bool(device_addresses(dev))  # IFF_UP, and an address


def wait_for_device(dev: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if device_ready(dev):
            return True
        time.sleep(0.1)
    return False


def client_rules(dest: str, benign_ports: str) -> list[list[str]]:
    """The policy rules, in priority order: benign flows keep the main table, the
    destination goes to the tunnel's table."""
    low = RULE_PRIORITY
    return [
        ["rule", "add", "priority", str(low), "ipproto", "tcp", "sport", benign_ports,
         "lookup", "main"],
        ["rule", "add", "priority", str(low + 1), "ipproto", "udp", "sport", benign_ports,
         "lookup", "main"],
        ["rule", "add", "priority", str(low + 2), "ipproto", "tcp", "dport", "22",
         "lookup", "main"],
        ["rule", "add", "priority", str(low + 3), "to", dest, "lookup", str(TABLE)],
    ]


def setup_client(dev: str, via: str, dest: str, benign_ports: str) -> list[list[str]]:
    """Install the route and rules; the commands that undo them."""
    _ip("route", "replace", dest, "via", via, "dev", dev, "table", str(TABLE))
    undo = [["route", "flush", "table", str(TABLE)]]
    for rule in client_rules(dest, benign_ports):
        _ip(*rule)
        undo.append(["rule", "del", *rule[2:]])
    return undo


def device_addresses(dev: str) -> list[str]:
    """The IPv4 addresses on ``dev`` (none if it is gone)."""
    shown = _ip("-4", "-o", "addr", "show", "dev", dev, check=False)
    if shown.returncode != 0:
        return []
    words = shown.stdout.split()
    return [words[i + 1].split("/")[0] for i, w in enumerate(words[:-1]) if w == "inet"]


def abort_tunnel_connections(dev: str, dest: str) -> None:
    """Abort the TCP connections from ``dev``'s addresses to ``dest`` (``ss -K``).

    Best effort: a kernel without socket destruction (CONFIG_INET_DIAG_DESTROY)
    leaves them, and ss says nothing.
    """
    for addr in device_addresses(dev):
        subprocess.run(["ss", "-K", "-t", "-n", "src", addr, "dst", dest],
                       capture_output=True, check=False)


def setup_server(subnet: str) -> tuple[str, list[list[str]]]:
    """Forwarding and masquerading for the tunnel's subnet; the old ip_forward."""
    old = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
    script = (f"table ip {NFT_TABLE} {{\n chain post {{ type nat hook postrouting priority 100;"
              f" ip saddr {subnet} masquerade; }}\n}}\n")
    subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True,
                   capture_output=True)
    return old, [["nft", "delete", "table", "ip", NFT_TABLE]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ptlab.processes.tunroute", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="side", required=True)
    c = sub.add_parser("client", help="route the workload destination via the tunnel")
    c.add_argument("--dev", required=True)
    c.add_argument("--via", required=True, help="the tunnel's server-side address")
    c.add_argument("--to", required=True, help="destination prefix, e.g. 198.18.5.2/32")
    c.add_argument("--benign-ports", required=True, help="LOW-HIGH source ports kept out")
    s = sub.add_parser("server", help="forward and masquerade the tunnel's subnet")
    s.add_argument("--dev", required=True)
    s.add_argument("--subnet", required=True)
    for q in (c, s):
        q.add_argument("--timeout", type=float, default=15.0)
    args = p.parse_args(argv)
    events = EventLog(f"tunroute-{args.side}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if not wait_for_device(args.dev, args.timeout):
        print(f"tunroute: {args.dev} not up with an address after {args.timeout:g} s",
              file=sys.stderr)
        return 1
    old_forward = None
    try:
        if args.side == "client":
            undo = setup_client(args.dev, args.via, args.to, args.benign_ports)
        else:
            old_forward, undo = setup_server(args.subnet)
    except (subprocess.CalledProcessError, OSError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        print(f"tunroute: {detail.strip()}", file=sys.stderr)
        return 2
    events.ready(dev=args.dev)
    while not stop.wait(0.5):
        pass
    if args.side == "client":
        abort_tunnel_connections(args.dev, args.to)
    for cmd in reversed(undo):
        subprocess.run(cmd if cmd[0] == "nft" else ["ip", *cmd], capture_output=True)
    if old_forward is not None:
        Path("/proc/sys/net/ipv4/ip_forward").write_text(old_forward)
    events.emit("removed", dev=args.dev)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
