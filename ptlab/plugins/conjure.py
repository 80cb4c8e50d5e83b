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
SNI ``conjure.lab``). The station's X25519 key is made per cell; the client
gets its public half as ``pubkey=``, as Conjure's ClientConf carries it.
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
from .base import CellContext, Endpoint, LabPlugin, Service, pt_client_service, pt_client_socks

PHANTOM_SUBNET = ISP_PHANTOMS
PHANTOMS = f"{ISP_PHANTOMS},{ISP_PHANTOMS6}"  # one weighted group, both families
STATION_PORT = 41245
DEFAULT_FRONT = "front.lab"


class ConjurePlugin(LabPlugin):
    def __init__(self, name: str = "conjure", transport: str = "min") -> None:
        self.name, self.default_transport = name, transport
        self.description = self.DESCRIPTION.format(transport=transport)

    DESCRIPTION = ("ptlab's Conjure: API registration fronted through the edge, the {transport} "
                   "transport to a phantom in the ISP's unused space, our station in the ISP")

    def check_options(self, options: dict[str, Any]) -> None:
        known = {"transport", "prefix", "reg_delay", "front", "v6"}
        unknown = set(options) - known
        if unknown:
            raise ValueError(f"unknown option {sorted(unknown)[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
        if options.get("transport", self.default_transport) not in ("min", "prefix", "obfs4"):
            raise ValueError("transport must be min, prefix or obfs4")
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
            "--trusted-edge", ctx.lab.addr("cdn"), "--private-key", str(key)))]

    def clients(self, ctx: CellContext) -> list[Service]:
        return [pt_client_service(ctx, self.name, "conjure",
                                  [sys.executable, "-m", "transports.pt"])]

    def endpoint(self, ctx: CellContext) -> Endpoint:
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


PLUGIN = ConjurePlugin()
PREFIX = ConjurePlugin("conjure-prefix", "prefix")
OBFS4 = ConjurePlugin("conjure-obfs4", "obfs4")
