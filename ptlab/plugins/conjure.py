"""The Conjure row: a client behind the censor, a station in the ISP that answers
for unused addresses of its range.

* The ISP node owns the ranges ``198.19.200.0/24`` and ``2001:db8:c800::/64``
  (topology extensions, routed to it by the core); their upper halves are
  phantom space (``v6 = true`` makes the client use an IPv6 phantom),
  and 198.19.200.10 in its lower half runs the ISP's own HTTP and binary
  servers, which join the benign mix (the lab services start them).
* The station (``python -m transports.conjure.station``) runs on the ISP node:
  its registrar sits behind the lab's TLS edge as ``conjure.lab`` (the client
  registers domain-fronted, SNI ``front.lab``); its datapath DNATs registered
  flows and silences the rest of the phantom space; covert connections go to
  the lab's upstream (the web node).
* The client is our ``conjure`` PT in managed mode in the client namespace.

Options: ``transport`` (``min``, ``prefix`` or ``obfs4``), ``prefix`` (a prefix id, 1:
``GET / HTTP/1.1``, the default), ``reg_delay`` (seconds between registering
and connecting; Conjure's 0.75 by default), ``front`` (``""``: register with
SNI ``conjure.lab``), ``client`` (``ptlab``, or ``refraction``: Refraction
Networking's own client, gotapdance v1.7.10's ``cli`` from ``scripts/setup
--peers``). The station's X25519 key is made per cell; our client gets its
public half as ``pubkey=``, Refraction's reads the ClientConf the station writes
(``--client-conf``). Refraction's client is a port forwarder to the covert
address (each connection one registration, straight to the registrar: it has no
fronting option), so its row has no SOCKS front (docs/transports/conjure.md §9).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from netns.topology import Topology
from transports.common.elligator2 import new_keypair, public_key_from_private
from transports.conjure.wrapping import PREFIXES

from ..common.wellknown import (
    CONJURE_EDGE_NAME,
    CONJURE_REGISTRAR_PORT,
    ISP_PHANTOMS,
    ISP_PHANTOMS6,
    ISP_RANGE,
    ISP_RANGE6,
)
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

#: Refraction Networking's client (scripts/peers.toml) and where it forwards from.
REFRACTION_CLIENT = "conjure-client"
REFRACTION_PORT = 10500
CLIENTS = ("ptlab", "refraction")
PHANTOM_SUBNET = ISP_PHANTOMS
PHANTOMS = f"{ISP_PHANTOMS},{ISP_PHANTOMS6}"  # one weighted group, both families
STATION_PORT = 41245
DEFAULT_FRONT = "front.lab"


class ConjurePlugin(LabPlugin):
    def __init__(self, name: str = "conjure", transport: str = "min",
                 client: str = "ptlab") -> None:
        self.name, self.default_transport, self.default_client = name, transport, client
        self.description = (self.DESCRIPTION if client == "ptlab"
                            else self.REFRACTION).format(transport=transport)

    REFRACTION = ("Refraction Networking's Conjure client (gotapdance v1.7.10, scripts/setup "
                  "--peers): API registration with our registrar, the {transport} transport "
                  "to a phantom, our station in the ISP")

    DESCRIPTION = ("ptlab's Conjure: API registration fronted through the edge, the {transport} "
                   "transport to a phantom in the ISP's unused space, our station in the ISP")

    def check_options(self, options: dict[str, Any]) -> None:
        known = {"transport", "prefix", "reg_delay", "front", "v6", "client"}
        unknown = set(options) - known
        if unknown:
            raise ValueError(f"unknown option {sorted(unknown)[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
        if options.get("transport", self.default_transport) not in ("min", "prefix", "obfs4"):
            raise ValueError("transport must be min, prefix or obfs4")
        client = options.get("client", self.default_client)
        if client not in CLIENTS:
            raise ValueError(f"client must be one of {', '.join(CLIENTS)}")
        if client == "refraction" and peer_path(REFRACTION_CLIENT) is None:
            raise ValueError(peer_missing("client", REFRACTION_CLIENT))
        if options.get("prefix", 1) not in PREFIXES:
            raise ValueError(f"prefix must be one of {sorted(PREFIXES)}")
        if not isinstance(options.get("v6", False), bool):
            raise ValueError("v6 must be true or false")
        delay = options.get("reg_delay", 0.75)
        if not isinstance(delay, int | float) or isinstance(delay, bool) or not 0 <= delay <= 10:
            raise ValueError("reg_delay must be a number of seconds from 0 to 10")

    def extend_topology(self, topology: Topology, options: dict[str, Any]) -> None:
        for prefix in (ISP_RANGE, ISP_RANGE6):
            if prefix not in topology.nodes["isp"].extra_prefixes:
                topology.add_prefix("isp", prefix)

    def _station_key(self, ctx: CellContext) -> tuple[Path, bytes]:
        path = ctx.workdir / "conjure-station.key"
        if not path.exists():
            path.write_text(new_keypair().private.hex() + "\n")
            path.chmod(0o600)
        return path, public_key_from_private(bytes.fromhex(path.read_text().strip()))

    def servers(self, ctx: CellContext) -> list[Service]:
        isp = ctx.lab.addr("isp")
        key, _ = self._station_key(ctx)
        return [Service("conjure-station", "isp", ctx.py(
            "transports.conjure.station", "--phantoms", PHANTOMS,
            "--listen", f"{isp}:{STATION_PORT}",
            "--listen6", f"[{ctx.lab.addr('isp', v6=True)}]:{STATION_PORT}",
            "--registrar", f"{isp}:{CONJURE_REGISTRAR_PORT}",
            # The subnet group lets a transport choose its port (a prefix's own: 80
            # for HTTP); without it Conjure puts every transport on 443.
            "--randomize-dst-port",
            "--trusted-edge", ctx.lab.addr("cdn"), "--private-key", str(key),
            "--client-conf", str(ctx.workdir / "conjure-assets")))]

    def _client(self, ctx: CellContext) -> str:
        return ctx.options.get("client", self.default_client)

    def clients(self, ctx: CellContext) -> list[Service]:
        if self._client(ctx) == "refraction":
            return [self._refraction_client(ctx)]
        return [pt_client_service(ctx, self.name, "conjure",
                                  [sys.executable, "-m", "transports.pt"])]

    def _refraction_client(self, ctx: CellContext) -> Service:
        up_host, up_port = ctx.upstream
        transport = ctx.options.get("transport", self.default_transport)
        argv = [peer_path(REFRACTION_CLIENT) or REFRACTION_CLIENT,
                "-assetsdir", str(ctx.workdir / "conjure-assets"), "-registrar", "api",
                "-api-endpoint",
                f"http://{ctx.lab.addr('isp')}:{CONJURE_REGISTRAR_PORT}/api/register",
                "-connect-addr", f"{up_host}:{up_port}", "-transport", transport,
                "-port", str(REFRACTION_PORT)]
        if transport == "prefix":
            argv += ["-prefix-id", str(ctx.options.get("prefix", 1))]
        if not ctx.options.get("v6"):
            argv.append("-disable-ipv6")
        # It listens right after this line; a probe of its port would be a session.
        # Its CPU profile goes to $TMPDIR on exit: the cell's directory.
        return Service(f"{self.name}-client", "client", argv, ready=r"Using Station Pubkey",
                       env={"TMPDIR": str(ctx.workdir)})

    def endpoint(self, ctx: CellContext) -> Endpoint:
        if self._client(ctx) == "refraction":  # a forwarder: its port is the web server
            return Endpoint("127.0.0.1", REFRACTION_PORT, "127.0.0.1", REFRACTION_PORT,
                            socks=False)
        host, port = pt_client_socks(ctx, self.name)
        up_host, up_port = ctx.upstream
        args = {"url": f"https://{CONJURE_EDGE_NAME}/api/register",
                "transport": ctx.options.get("transport", self.default_transport),
                "phantoms": PHANTOMS, "generation": "1", "phantoms-random-port": "1",
                "v6": "1" if ctx.options.get("v6") else "0",
                "covert": f"{up_host}:{up_port}",
                "reg-delay": str(ctx.options.get("reg_delay", 0.75))}
        if args["transport"] == "prefix":
            args["prefix"] = str(ctx.options.get("prefix", 1))
            args["pubkey"] = self._station_key(ctx)[1].hex()
        front = ctx.options.get("front", DEFAULT_FRONT)
        if front:
            args["front"] = front
        return Endpoint(host, port, up_host, up_port, args)


    def peer_binaries(self) -> list[str]:
        return [REFRACTION_CLIENT] if self.default_client == "refraction" else []


PLUGIN = ConjurePlugin()
PREFIX = ConjurePlugin("conjure-prefix", "prefix")
OBFS4 = ConjurePlugin("conjure-obfs4", "obfs4")
REFRACTION = ConjurePlugin("conjure-refraction", "min", client="refraction")
REFRACTION_OBFS4 = ConjurePlugin("conjure-refraction-obfs4", "obfs4", client="refraction")
