"""Lab rows that run real tor through the lab's private Tor network (ptlab.tor).

* ``tor`` - vanilla Tor: the client in the client namespace fetches the
  consensus from the authorities and builds circuits through the relays, all
  on the ``tornet`` node past the censor; a relay blocklist stops it.
* ``tor+obfs4`` - a bridge in the bridge namespace whose tor runs *our*
  obfs4 server PT (``python -m transports.pt``) with the Extended ORPort, and
  a client whose tor runs our obfs4 client PT with the bridge's line.
* ``tor+meek`` - the bridge's tor runs our meek server PT behind the CDN
  edge's reflector route (meek.lab); the client's tor runs our meek client
  PT, fronted (SNI front.lab).
* ``tor+snowflake`` - the bridge's tor runs our Snowflake server PT; the
  broker and a volunteer proxy (ours, aiortc) run as in the ``snowflake``
  row, and the client's tor runs our Snowflake client PT.
* ``tor+conjure`` - the client's tor runs our Conjure client PT (min); the
  ISP station relays the phantom connection to the bridge's plain ORPort.
* ``tor+webtunnel`` - the bridge's tor runs our WebTunnel server PT on the
  loopback behind Debian's nginx (the ``webtunnel`` row's site and secret
  path); the client's tor runs our WebTunnel client PT with the bridge line
  Tor publishes for such a bridge, synthetic address and all.
* ``tor+webtunnel-tor-server`` - the same, with Tor's own WebTunnel server PT
  (built by ``scripts/setup --peers``) in the bridge's tor (docs/lab/peers.md §3.2).

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
from transports.webtunnel.synthetic import bridge_line as webtunnel_bridge_line

from ..common.labview import namespace_lab
from ..common.wellknown import CONJURE_EDGE_NAME, MEEK_EDGE_NAME, MEEK_PORT
from ..tor.network import BRIDGE_ORPORT, TORNET, TorNetwork, existing, shared
from .base import CellContext, Endpoint, LabPlugin, Service, peer_path
from .conjure import PHANTOMS as CONJURE_PHANTOMS
from .conjure import PLUGIN as CONJURE
from .snowflake import BRIDGE_PORT as SNOWFLAKE_BRIDGE_PORT
from .snowflake import SNOWFLAKE
from .webtunnel import BACKEND_PORT as WEBTUNNEL_BACKEND_PORT
from .webtunnel import front_service as webtunnel_front
from .webtunnel import site_url as webtunnel_url

OBFS4_PORT = 9002  # the bridge's obfs4 listener
MEEK_PLACEHOLDER = "198.19.254.1:1"  # a meek bridge line's address: never dialled
SNOWFLAKE_PLACEHOLDER = "198.19.254.2:1"
CONJURE_PLACEHOLDER = "198.19.254.3:1"
PT_COMMAND = f"{sys.executable} -m transports.pt"
# tor logs this when the bootstrap is complete (control_bootstrap.c).
DONE = re.compile(r"^(\w+ \d+ [\d:.]+) \[notice\] Bootstrapped 100%", re.M)
SEEN = re.compile(r"Seen client from '([^']+)' with transport '([^']+)'")
START = re.compile(r"^(\w+ \d+ [\d:.]+) \[notice\] Bootstrapped 0%", re.M)


class TorPlugin(LabPlugin):
    """Real tor in the lab, vanilla or through one of our transports."""

    # The first consensus takes about 10 s, a bootstrap through a bridge a few more.
    bootstrap_floor_s = 45.0

    def __init__(self, name: str, transport: str | None, description: str,
                 server_pt: str | None = None) -> None:
        self.name, self.transport, self.description = name, transport, description
        # A real peer's server PT for the bridge's tor (a tool name that
        # scripts/setup --peers builds), None for ours.
        self.server_pt = server_pt

    def _server_command(self) -> str:
        if self.server_pt is None:
            return PT_COMMAND
        return peer_path(self.server_pt) or self.server_pt

    def check_options(self, options: dict[str, Any]) -> None:
        if options:
            raise ValueError(f"unknown option {sorted(options)[0]!r} (this row has none)")

    def extend_topology(self, topology: Topology, options: dict[str, Any]) -> None:
        if TORNET not in topology.nodes:
            topology.add_node(TORNET, "tn")
            topology.add_link("inet", TORNET)
        if self.transport == "snowflake":
            SNOWFLAKE.extend_topology(topology, {})  # a proxy node
        if self.transport == "conjure":
            CONJURE.extend_topology(topology, {})  # the ISP's phantom space

    def peer_binaries(self) -> list[str]:
        own = [self.server_pt] if self.server_pt else []
        return ["tor", "nginx", *own] if self.transport == "webtunnel" else ["tor", *own]

    def _network(self, ctx: CellContext) -> TorNetwork:
        # Everything tor writes goes to the lab's state directory, which goes
        # with the lab (also after a crash: ptlab lab down); the cell keeps the logs.
        lab = namespace_lab(ctx.lab, "the private Tor network")
        return shared(lab, lab.state_dir / "tor")

    def _datadir(self, ctx: CellContext, which: str) -> Path:
        return self._network(ctx).base / "cells" / ctx.workdir.name / which

    # --- processes ------------------------------------------------------------

    def servers(self, ctx: CellContext) -> list[Service]:
        net = self._network(ctx)
        if self.transport is None:
            return []
        datadir = self._datadir(ctx, "bridge")
        if self.transport == "conjure":
            # Conjure's station relays to a plain bridge ORPort: no PT on the bridge.
            bridge = net.bridge(datadir)
            ready = r"Opened OR listener"
        else:
            bridge = net.bridge(datadir, extra=[
                f"ServerTransportPlugin {self.transport} exec {self._server_command()}",
                *self._server_lines(ctx),
                "ExtORPort auto",
                # What the Extended ORPort told tor (transport, client address) is
                # logged at debug level only, in these two domains.
                f"Log [general,net]debug file {datadir / 'debug.log'}",
            ])
            ready = rf"Registered server transport '{self.transport}'"
        proc = net.process(bridge)
        services = [Service("tor-bridge", "bridge", proc.argv, ready=ready,
                            ready_timeout_s=60.0)]
        if self.transport == "snowflake":
            # Snowflake's broker, NAT probe and a volunteer proxy, as in the
            # snowflake row; the bridge's WebSocket server is the tor bridge's PT.
            services += [svc for svc in SNOWFLAKE.servers(ctx) if svc.name != "snowflake-bridge"]
        if self.transport == "conjure":
            services += CONJURE.servers(ctx)  # the station and its registrar
        if self.transport == "webtunnel":
            services.append(webtunnel_front(ctx))  # nginx, in front of the bridge's PT
        return services

    def _server_lines(self, ctx: CellContext) -> list[str]:
        if self.transport == "obfs4":
            return [f"ServerTransportListenAddr obfs4 0.0.0.0:{OBFS4_PORT}"]
        if self.transport == "meek":
            # Behind the edge's reflector route (meek.lab), plain HTTP; the client
            # address comes from the edge's Meek-IP header, trusted from the edge only.
            edge = ",".join(namespace_lab(ctx.lab, "tor's meek bridge").topology.addresses("cdn"))
            return [f"ServerTransportListenAddr meek 0.0.0.0:{MEEK_PORT}",
                    f"ServerTransportOptions meek trusted-edge={edge}"]
        if self.transport == "snowflake":
            return [f"ServerTransportListenAddr snowflake 0.0.0.0:{SNOWFLAKE_BRIDGE_PORT}"]
        if self.transport == "webtunnel":
            # On the loopback: only nginx reaches it, for the secret path.
            return [f"ServerTransportListenAddr webtunnel 127.0.0.1:{WEBTUNNEL_BACKEND_PORT}",
                    f"ServerTransportOptions webtunnel url={webtunnel_url(ctx)}"]
        raise ValueError(f"no bridge configuration for {self.transport}")

    def _bridge_line(self, ctx: CellContext, fingerprint: str) -> str:
        bridge_dir = self._datadir(ctx, "bridge")
        if self.transport == "obfs4":
            args = _bridge_args(bridge_dir / "pt_state" / "obfs4_bridgeline.txt")
            return f"Bridge obfs4 {ctx.lab.addr('bridge')}:{OBFS4_PORT} {fingerprint} {args}"
        if self.transport == "meek":
            # The address is a placeholder the PT never dials: the edge is the way in.
            return (f"Bridge meek {MEEK_PLACEHOLDER} {fingerprint} "
                    f"url=https://{MEEK_EDGE_NAME}/ front=front.lab")
        if self.transport == "snowflake":
            # Also a placeholder: the broker names the bridge to the proxy.
            return (f"Bridge snowflake {SNOWFLAKE_PLACEHOLDER} {fingerprint} "
                    f"url={SNOWFLAKE._broker_url(ctx)} ice={SNOWFLAKE._stun(ctx, 'ptlab')} "
                    "max=1")
        if self.transport == "conjure":
            # The station relays the phantom connection to the covert address,
            # the bridge's ORPort; the line's own address is never dialled.
            options = {"url": f"https://{CONJURE_EDGE_NAME}/api/register", "transport": "min",
                    "phantoms": CONJURE_PHANTOMS, "generation": "1", "v6": "0",
                    "covert": f"{ctx.lab.addr('bridge')}:{BRIDGE_ORPORT}",
                    "reg-delay": "0.75", "front": "front.lab"}
            return (f"Bridge conjure {CONJURE_PLACEHOLDER} {fingerprint} "
                    + " ".join(f"{k}={v}" for k, v in options.items()))
        if self.transport == "webtunnel":
            # As Tor publishes it: the url's synthetic address (never dialled).
            return f"Bridge {webtunnel_bridge_line(webtunnel_url(ctx), fingerprint)}"
        raise ValueError(f"no bridge line for {self.transport}")

    def clients(self, ctx: CellContext) -> list[Service]:
        net = self._network(ctx)
        extra: list[str] = []
        env: dict[str, str] = {}
        if self.transport is not None:
            fp = (self._datadir(ctx, "bridge") / "fingerprint").read_text().split()[1]
            extra = ["UseBridges 1", self._bridge_line(ctx, fp),
                     f"ClientTransportPlugin {self.transport} exec {PT_COMMAND}"]
            if ctx.lab_ca:  # tor hands its environment to the PT: the edge's CA
                env["SSL_CERT_FILE"] = str(ctx.lab_ca)
        client = net.client(self._datadir(ctx, "client"), extra=extra)
        proc = net.process(client)
        return [Service("tor-client", "client", proc.argv, env=env,
                        ready=r"Opened Socks listener", ready_timeout_s=30.0)]

    def endpoint(self, ctx: CellContext) -> Endpoint:
        host, port = ctx.upstream
        return Endpoint("127.0.0.1", 9050, host, port)

    def notes(self, ctx: CellContext) -> list[str]:
        log = ctx.workdir / "tor-client.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        # Reading notes must not start (or restart) a network.
        net = existing(namespace_lab(ctx.lab, "tor"))
        out = [f"tor network: a consensus with every relay and exit {net.up_s:.1f} s "
               f"after it started"] if net and net.up_s is not None else []
        done, start = DONE.search(text), START.search(text)
        if not done:
            return [*out, "tor: did not reach Bootstrapped 100%"]
        took = ""
        if start:
            took = f" {_seconds(done.group(1)) - _seconds(start.group(1)):.1f} s after 0%,"
        out.append(f"tor: Bootstrapped 100%{took} at {done.group(1)}")
        debug = (net.base / "cells" / ctx.workdir.name / "bridge" / "debug.log") if net \
            else Path("/nonexistent")
        text = debug.read_text(errors="replace") if debug.exists() else ""
        # What our server PT reported through the Extended ORPort; the relays'
        # own connections to the bridge's ORPort come with no transport.
        seen = [m for m in SEEN.finditer(text) if m.group(2) != "<no transport>"]
        if seen:
            out.append(f"bridge tor (Extended ORPort): client {seen[0].group(1)}, "
                       f"transport {seen[0].group(2)}")
        return out


def _seconds(stamp: str) -> float:
    """Seconds since midnight of a tor log time stamp ("Nov 23 19:23:12.040")."""
    h, m, sec = stamp.split()[-1].split(":")
    return int(h) * 3600 + int(m) * 60 + float(sec)


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
TOR_SNOWFLAKE = TorPlugin("tor+snowflake", "snowflake", "tor with a bridge whose tor runs our "
                          "Snowflake server PT (WebSocket, Turbo Tunnel), reached through our "
                          "broker and an aiortc proxy by our Snowflake client PT")
TOR_CONJURE = TorPlugin("tor+conjure", "conjure", "tor whose Conjure client PT (min) registers "
                        "through the edge and reaches a plain bridge ORPort through the ISP "
                        "station's phantom address")
TOR_WEBTUNNEL = TorPlugin("tor+webtunnel", "webtunnel", "tor with a bridge whose tor runs our "
                          "WebTunnel server PT behind Debian nginx (bridge.lab, secret path), "
                          "and our WebTunnel client PT")
TOR_WEBTUNNEL_TOR_SERVER = TorPlugin(
    "tor+webtunnel-tor-server", "webtunnel", "tor with a bridge whose tor runs Tor's own "
    "WebTunnel server PT (scripts/setup --peers) behind Debian nginx, and our WebTunnel "
    "client PT", server_pt="webtunnel-server")
TOR_MEEK = TorPlugin("tor+meek", "meek", "tor with a bridge whose tor runs our meek server "
                     "PT behind the edge (meek.lab), and our meek client PT fronted by "
                     "front.lab")
