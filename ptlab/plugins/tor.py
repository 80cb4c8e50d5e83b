"""Lab rows that run real tor through the lab's private Tor network (ptlab.tor).

* ``tor`` - vanilla Tor: the client in the client namespace fetches the
  consensus from the authorities and builds circuits through the relays, all
  on the ``tornet`` node past the censor; a relay blocklist stops it.
* ``tor+obfs4`` - a bridge in the bridge namespace whose tor runs *our*
  obfs4 server PT (``python -m transports.pt``) with the Extended ORPort, and
  a client whose tor runs our obfs4 client PT with the bridge's line.

The workloads go through the client tor's SOCKS port to the web node, over
a three-hop circuit, byte-exact as for every row. The network starts once
per lab (about 10 s to a first consensus here) and serves every cell.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from netns.topology import Topology

from ..tor.network import TORNET, TorNetwork, shared
from .base import CellContext, Endpoint, LabPlugin, Service

OBFS4_PORT = 9002  # the bridge's obfs4 listener
PT_COMMAND = f"{sys.executable} -m transports.pt"
# tor logs this when the bootstrap is complete (control_bootstrap.c).
DONE = re.compile(r"^(\w+ \d+ [\d:.]+) \[notice\] Bootstrapped 100%", re.M)


class TorPlugin(LabPlugin):
    """Real tor in the lab, vanilla or through one of our transports."""

    # The first consensus takes about 10 s, a bootstrap through a bridge a few more.
    bootstrap_floor_s = 45.0

    def __init__(self, name: str, transport: str | None, description: str) -> None:
        self.name, self.transport, self.description = name, transport, description

    def check_options(self, options: dict[str, Any]) -> None:
        if options:
            raise ValueError(f"unknown option {sorted(options)[0]!r} (this row has none)")

    def extend_topology(self, topology: Topology, options: dict[str, Any]) -> None:
        if TORNET not in topology.nodes:
            topology.add_node(TORNET, "tn")
            topology.add_link("inet", TORNET)

    def peer_binaries(self) -> list[str]:
        return ["tor"]

    def _network(self, ctx: CellContext) -> TorNetwork:
        base = (ctx.lab_dir or ctx.workdir) / "tor"
        return shared(ctx.lab, base)

    # --- processes ------------------------------------------------------------

    def servers(self, ctx: CellContext) -> list[Service]:
        net = self._network(ctx)
        if self.transport is None:
            return []
        datadir = ctx.workdir / "tor-bridge"
        bridge = net.bridge(datadir, extra=[
            f"ServerTransportPlugin obfs4 exec {PT_COMMAND}",
            f"ServerTransportListenAddr obfs4 0.0.0.0:{OBFS4_PORT}",
            "ExtORPort auto",
            # What the Extended ORPort told tor (transport, client address) is
            # logged at debug level only, in these two domains.
            f"Log [general,net]debug file {datadir / 'debug.log'}",
        ])
        proc = net.process(bridge)
        return [Service("tor-bridge", "bridge", proc.argv,
                        ready=r"Registered server transport 'obfs4'", ready_timeout_s=60.0)]

    def clients(self, ctx: CellContext) -> list[Service]:
        net = self._network(ctx)
        extra: list[str] = []
        if self.transport == "obfs4":
            bridge_dir = ctx.workdir / "tor-bridge"
            fp = (bridge_dir / "fingerprint").read_text().split()[1]
            args = _bridge_args(bridge_dir / "pt_state" / "obfs4_bridgeline.txt")
            extra = ["UseBridges 1",
                     f"Bridge obfs4 {ctx.lab.addr('bridge')}:{OBFS4_PORT} {fp} {args}",
                     f"ClientTransportPlugin obfs4 exec {PT_COMMAND}"]
        client = net.client(ctx.workdir / "tor-client", extra=extra)
        proc = net.process(client)
        return [Service("tor-client", "client", proc.argv,
                        ready=r"Opened Socks listener", ready_timeout_s=30.0)]

    def endpoint(self, ctx: CellContext) -> Endpoint:
        host, port = ctx.upstream
        return Endpoint("127.0.0.1", 9050, host, port)

    def notes(self, ctx: CellContext) -> list[str]:
        log = ctx.workdir / "tor-client.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        m = DONE.search(text)
        return [f"tor: Bootstrapped 100% at {m.group(1)}"] if m else [
            "tor: did not reach Bootstrapped 100%"]


def _bridge_args(path: Path) -> str:
    """``cert=... iat-mode=...`` from the bridge line our obfs4 server PT wrote."""
    text = path.read_text()
    m = re.search(r"(cert=\S+)\s+(iat-mode=\d)", text)
    if not m:
        raise ValueError(f"{path}: no cert= and iat-mode= in the bridge line")
    return f"{m.group(1)} {m.group(2)}"


TOR = TorPlugin("tor", None, "vanilla Tor through the lab's private Tor network "
                "(3 authorities, 2 exits)")
TOR_OBFS4 = TorPlugin("tor+obfs4", "obfs4", "tor with a bridge whose tor runs our obfs4 "
                      "server PT (Extended ORPort), and our obfs4 client PT")
