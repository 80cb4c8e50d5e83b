"""The Snowflake rows: broker, volunteer proxies, client and bridge, each in its slot.

Where each piece runs (docs/architecture.md §1.1):

* the bridge (``python -m transports.snowflake.server``) on the bridge node,
  relaying each smux stream to the lab's upstream;
* our broker (``python -m broker``) on the broker node, reached by the client
  either directly (``rendezvous = "direct"``: plain HTTP to broker.lab), through
  the TLS edge under its own name (``"edge"``: https://snowflake.lab/), or
  domain-fronted (``"fronted"``: TLS with SNI front.lab, Host snowflake.lab);
  behind the edge, the broker trusts the edge's X-Forwarded-For only;
* N volunteer proxies on their own nodes outside the censor (``proxyN``);
  ours learn their NAT type from a probe service beside the broker
  (Debian's 2.5.1 has Tor's probe URL built in, fails, and says ``unknown``);
* the client in PT managed mode in the client namespace, behind the censor.
  The WebRTC flow between client and proxy crosses the censor; the proxy's
  WebSocket to the bridge and its polls do not.

Proxy and client are either ours (aiortc: ``ptlab``) or Debian's 2.5.1 binaries
(pion: ``debian``), so the DTLS stacks a censor fingerprints differ by row.
Debian's binaries get a STUN URL with no route (they wait out unreachable
gathering otherwise, docs/transports/snowflake.md §7.4); ours use the lab STUN server.

Snowflake's current release (``upstream``, 2.14.1, built from its Go module by
``scripts/setup --peers``) may take either slot too, and its broker may stand in
for ours (``broker = "upstream"``): so our proxy polls the current broker, the
current proxy polls ours, and the current client goes through ours.

Options (``[transports.<name>]``): ``client``, ``proxy`` (``ptlab``, ``debian``
or ``upstream``), ``broker`` (``ptlab`` or ``upstream``), ``proxies`` (1-8,
default 1), ``rendezvous`` (as above, default ``direct``), ``max_peers`` (the
client's ``max=``, default 1), ``proxy_pool`` (our proxies per process, default
1: see :mod:`ptlab.processes.proxypool`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from netns.topology import Topology
from transports.snowflake.messages import DEFAULT_BRIDGE_FINGERPRINT

from ..common.labview import namespace_lab
from ..common.wellknown import SNOWFLAKE_BROKER_PORT, SNOWFLAKE_EDGE_NAME, STUN_PORT
from .base import (
    CellContext,
    Endpoint,
    LabPlugin,
    Service,
    peer_missing,
    peer_path,
    pt_client_service,
    pt_client_socks,
)

BRIDGE_PORT = 8443
NAT_PROBE_PORT = 8081  # the NAT probe service, beside the broker
PROXY_UDP_PORTS = "40000:40999"  # our proxies' ICE sockets (-ephemeral-ports-range)
NO_ROUTE_STUN = "stun:203.0.113.1:3478"  # no route in the lab: pion's gathering ends at once
FRONT_NAME = "front.lab"
IMPLEMENTATIONS = ("ptlab", "debian", "upstream")
BROKERS = ("ptlab", "upstream")
RENDEZVOUS = ("direct", "edge", "fronted")
DEBIAN_BINARIES = {"client": "snowflake-client", "proxy": "snowflake-proxy"}
#: Snowflake's current release, from scripts/setup --peers (scripts/peers.toml).
UPSTREAM_BINARIES = {"client": "snowflake-upstream-client", "proxy": "snowflake-upstream-proxy",
                     "broker": "snowflake-upstream-broker"}
BINARIES = {"debian": DEBIAN_BINARIES, "upstream": UPSTREAM_BINARIES}
PROXY_READY = {"ptlab": r"proxy starting", "debian": r"[Pp]roxy starting",
               "upstream": r"[Pp]roxy starting"}


class SnowflakePlugin(LabPlugin):
    """One Snowflake row; ``client`` and ``proxy`` default per registered name."""

    # A spec's sanity limit on proxy nodes per row; benchmarks/snowflake_scale.py
    # raises it for the length of its own lab.
    max_proxies = 8

    def __init__(self, name: str, client: str, proxy: str, description: str,
                 broker: str = "ptlab") -> None:
        self.name, self.description = name, description
        self.default = {"client": client, "proxy": proxy, "broker": broker}

    # --- options and topology -------------------------------------------------

    def check_options(self, options: dict[str, Any]) -> None:
        known = {"client", "proxy", "broker", "proxies", "rendezvous", "max_peers", "proxy_pool"}
        unknown = set(options) - known
        if unknown:
            raise ValueError(f"unknown option {sorted(unknown)[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
        for side in ("client", "proxy"):
            impl = options.get(side, self.default[side])
            if impl not in IMPLEMENTATIONS:
                raise ValueError(f"{side}: unknown implementation {impl!r} "
                                 f"(known: {', '.join(IMPLEMENTATIONS)})")
            if impl != "ptlab" and peer_path(BINARIES[impl][side]) is None:
                raise ValueError(peer_missing(side, BINARIES[impl][side]))
        broker = options.get("broker", self.default["broker"])
        if broker not in BROKERS:
            raise ValueError(f"broker: unknown implementation {broker!r} "
                             f"(known: {', '.join(BROKERS)})")
        if broker == "upstream":
            if peer_path(UPSTREAM_BINARIES["broker"]) is None:
                raise ValueError(peer_missing("broker", UPSTREAM_BINARIES["broker"]))
            if options.get("rendezvous", "direct") != "direct":
                raise ValueError('broker = "upstream" takes rendezvous = "direct" only '
                                 "(it trusts no edge's X-Forwarded-For)")
        proxies = options.get("proxies", 1)
        top = self.max_proxies
        if not isinstance(proxies, int) or isinstance(proxies, bool) or not 1 <= proxies <= top:
            raise ValueError(f"proxies must be an integer from 1 to {top}")
        peers = options.get("max_peers", 1)
        if not isinstance(peers, int) or isinstance(peers, bool) or not 1 <= peers <= proxies:
            raise ValueError("max_peers must be an integer from 1 to proxies")
        pool = options.get("proxy_pool", 1)
        if not isinstance(pool, int) or isinstance(pool, bool) or pool < 1:
            raise ValueError("proxy_pool must be an integer >= 1 (proxies per process)")
        if pool > 1 and options.get("proxy", self.default["proxy"]) != "ptlab":
            raise ValueError('proxy_pool needs proxy = "ptlab" (Debian\'s runs one per process)')
        if options.get("rendezvous", "direct") not in RENDEZVOUS:
            raise ValueError(f"rendezvous must be one of {', '.join(RENDEZVOUS)}")

    def extend_topology(self, topology: Topology, options: dict[str, Any]) -> None:
        """Proxy nodes on the internet side, as many as the row asks for."""
        for i in range(options.get("proxies", 1)):
            node = f"proxy{i}"
            if node not in topology.nodes:
                topology.add_node(node, f"p{i}")
                topology.add_link("inet", node)

    # --- processes ------------------------------------------------------------

    def _impl(self, ctx: CellContext, side: str) -> str:
        return ctx.options.get(side, self.default[side])

    @staticmethod
    def _direct_broker_url(ctx: CellContext) -> str:
        """The broker on its own node (proxies, outside the censor, always poll it so)."""
        return f"http://{ctx.lab.addr('broker')}:{SNOWFLAKE_BROKER_PORT}/"

    def _broker_url(self, ctx: CellContext) -> str:
        """Where the client rendezvouses: directly, or the broker's name on the edge."""
        if ctx.options.get("rendezvous", "direct") == "direct":
            return self._direct_broker_url(ctx)
        return f"https://{SNOWFLAKE_EDGE_NAME}/"  # the edge listens on 443

    def _stun(self, ctx: CellContext, impl: str) -> str:
        return NO_ROUTE_STUN if impl != "ptlab" else f"stun:{ctx.lab.addr('svc')}:{STUN_PORT}"

    def _broker_service(self, ctx: CellContext, bridges: str, exact: str) -> Service:
        addr = f"{ctx.lab.addr('broker')}:{SNOWFLAKE_BROKER_PORT}"
        if ctx.options.get("broker", self.default["broker"]) == "upstream":
            # It prints nothing when ready: the launcher says so once its port accepts.
            binary = UPSTREAM_BINARIES["broker"]
            return Service("snowflake-broker", "broker", ctx.py(
                "ptlab.processes.extlaunch", "--ready-port", addr,
                "--component", "snowflake-broker", "--",
                peer_path(binary) or binary, "-addr", addr, "-disable-tls", "-disable-geoip",
                "-allowed-relay-pattern", exact, "-bridge-list-path", bridges))
        broker = ctx.py("broker", "--addr", addr,
                        "--disable-tls", "--allowed-relay-pattern", exact,
                        "--default-relay-pattern", exact, "--bridge-list-path", bridges,
                        "--proxy-timeout", "8", "--next-poll", "1000",
                        "--unknown-proxies-unrestricted")
        if ctx.options.get("rendezvous", "direct") != "direct":
            broker += ["--trusted-edge", ctx.lab.addr("cdn")]
        return Service("snowflake-broker", "broker", broker)

    def servers(self, ctx: CellContext) -> list[Service]:
        bridge = ctx.lab.addr("bridge")
        host, port = ctx.upstream
        relay = f"ws://{bridge}:{BRIDGE_PORT}/"
        bridges = ctx.workdir / "snowflake-bridges.jsonl"
        bridges.write_text(json.dumps({"displayName": "lab", "webSocketAddress": relay,
                                       "fingerprint": DEFAULT_BRIDGE_FINGERPRINT}) + "\n")
        exact = f"^{bridge}$"
        probe = f"{ctx.lab.addr('broker')}:{NAT_PROBE_PORT}"
        services = [
            Service("snowflake-natprobe", "broker", ctx.py(
                "transports.snowflake.natprobe", "--addr", probe,
                "--stun", self._stun(ctx, "ptlab"))),
            Service("snowflake-bridge", "bridge", ctx.py(
                "transports.snowflake.server", "--listen", f"{bridge}:{BRIDGE_PORT}",
                "--dest", f"{host}:{port}")),
            self._broker_service(ctx, str(bridges), exact),
        ]
        impl = self._impl(ctx, "proxy")
        flags = ["-broker", self._direct_broker_url(ctx), "-relay", relay,
                 "-allowed-relay-hostname-pattern", exact, "-allow-non-tls-relay",
                 "-stun", self._stun(ctx, impl), "-poll-interval", "1",
                 "-nat-probe-server", f"http://{probe}/probe",
                 "-ephemeral-ports-range", PROXY_UDP_PORTS]
        count, pool = ctx.options.get("proxies", 1), ctx.options.get("proxy_pool", 1)
        if impl == "ptlab" and pool > 1:
            # Several proxies per process, each thread in its own proxy node.
            lab = namespace_lab(ctx.lab, "a pool of Snowflake proxies")
            for first in range(0, count, pool):
                nodes = [f"proxy{i}" for i in range(first, min(first + pool, count))]
                argv = ctx.py("ptlab.processes.proxypool",
                              *[a for n in nodes for a in ("--netns", lab.ns(n))],
                              "--", *flags)
                services.append(Service(f"snowflake-proxies{first}", nodes[0], argv,
                                        ready_timeout_s=15.0 + len(nodes)))
            return services
        for i in range(count):
            if impl == "ptlab":
                argv = ctx.py("ptlab", "snowflake-proxy", *flags)
            else:
                binary = BINARIES[impl]["proxy"]
                argv = [peer_path(binary) or binary, "-broker", self._direct_broker_url(ctx),
                        "-relay", relay, "-allowed-relay-hostname-pattern", f"{bridge}$",
                        "-allow-non-tls-relay", "-stun", self._stun(ctx, impl), "-verbose",
                        "-summary-interval", "1h"]
                if impl == "upstream":  # 2.9+ takes a probe URL: it learns it is unrestricted
                    argv += ["-nat-probe-server", f"http://{probe}/probe"]
            services.append(Service(f"snowflake-proxy{i}", f"proxy{i}", argv,
                                    ready=PROXY_READY[impl]))
        return services

    def clients(self, ctx: CellContext) -> list[Service]:
        impl = self._impl(ctx, "client")
        if impl == "ptlab":
            cmd = [sys.executable, "-m", "transports.pt"]
        else:
            binary = BINARIES[impl]["client"]
            cmd = [peer_path(binary) or binary, "-url", self._broker_url(ctx),
                   "-ice", self._stun(ctx, impl), "-max", str(ctx.options.get("max_peers", 1)),
                   "-log", str(ctx.workdir / "snowflake-client-own.log")]
            if ctx.options.get("rendezvous") == "fronted":
                cmd += ["-front", FRONT_NAME]
        return [pt_client_service(ctx, self.name, "snowflake", cmd)]

    def endpoint(self, ctx: CellContext) -> Endpoint:
        host, port = pt_client_socks(ctx, self.name)
        args: dict[str, str] = {}
        if self._impl(ctx, "client") == "ptlab":  # a bridge line's arguments, as tor passes them
            args = {"url": self._broker_url(ctx), "ice": self._stun(ctx, "ptlab"),
                    "max": str(ctx.options.get("max_peers", 1))}
            if ctx.options.get("rendezvous") == "fronted":
                args["front"] = FRONT_NAME
        upstream_host, upstream_port = ctx.upstream
        return Endpoint(host, port, upstream_host, upstream_port, args)

    def peer_binaries(self) -> list[str]:
        sides = [BINARIES[self.default[side]][side] for side in ("client", "proxy")
                 if self.default[side] != "ptlab"]
        if self.default["broker"] == "upstream":
            sides.append(UPSTREAM_BINARIES["broker"])
        return sides


SNOWFLAKE = SnowflakePlugin(
    "snowflake", "ptlab", "ptlab",
    "ptlab's Snowflake: our client and proxy (DTLS: aiortc at both ends), broker and bridge")
SNOWFLAKE_DEBIAN_PROXY = SnowflakePlugin(
    "snowflake-debian-proxy", "ptlab", "debian",
    "Debian's snowflake-proxy 2.5.1 relays our client to our bridge (DTLS: client aiortc, "
    "proxy pion; the proxy, as answerer, sends the ClientHello)")
SNOWFLAKE_DEBIAN_CLIENT = SnowflakePlugin(
    "snowflake-debian-client", "debian", "ptlab",
    "Debian's snowflake-client 2.5.1 through our broker, proxy and bridge (DTLS: client "
    "pion, proxy aiortc; the proxy sends the ClientHello)")
SNOWFLAKE_UPSTREAM_PROXY = SnowflakePlugin(
    "snowflake-upstream-proxy", "ptlab", "upstream",
    "Snowflake's current proxy (2.14.1, scripts/setup --peers) polls our broker and relays "
    "our client to our bridge")
SNOWFLAKE_UPSTREAM_CLIENT = SnowflakePlugin(
    "snowflake-upstream-client", "upstream", "ptlab",
    "Snowflake's current client (2.14.1, scripts/setup --peers) through our broker, proxy "
    "and bridge")
SNOWFLAKE_UPSTREAM_BROKER = SnowflakePlugin(
    "snowflake-upstream-broker", "upstream", "ptlab",
    "our proxy polls Snowflake's current broker (2.14.1, scripts/setup --peers) and "
    "relays its current client to our bridge", broker="upstream")
