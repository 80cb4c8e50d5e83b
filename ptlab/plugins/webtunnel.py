"""The WebTunnel rows: our client, through Debian's nginx, to our server.

Where each piece runs (docs/transports/webtunnel.md §7.1):

* Debian's nginx in the bridge namespace, on port 443 of every bridge address,
  with a lab certificate for the bridge's own name (``bridge.lab``, not the
  CDN edge's). It serves a small real site and proxies one secret path, with
  ``Upgrade``, to the loopback (:mod:`ptlab.services.nginxfront`), as Tor's
  documentation tells bridge operators to;
* our WebTunnel server in PT managed mode behind it, on the loopback, relaying
  each upgraded connection to the lab's upstream;
* our client in PT managed mode in the client namespace, given the bridge
  line's arguments (``url=https://bridge.lab/<secret>``); it trusts the lab CA.

Rows: ``webtunnel`` (SNI ``bridge.lab``) and ``webtunnel-imitation``, whose
client sends ``sni-imitation=www.benign.lab`` and still checks the certificate
for ``bridge.lab``. Options: ``sni_imitation``, ``servername`` (bridge-line
arguments of the same names; ``""`` for none), and the implementation of each
side: ``client`` (``ptlab`` or ``lyrebird``, Tor's current PT) and ``server``
(``ptlab`` or ``tor``, Tor's own WebTunnel server); both real ones come from
``scripts/setup --peers``. The row ``webtunnel-lyrebird`` is lyrebird's client
against our server, ``webtunnel-tor-server`` our client against Tor's server
(docs/lab/peers.md §3.2). ``tor+webtunnel`` is in :mod:`.tor`.
"""

from __future__ import annotations

import sys
from typing import Any

from transports.webtunnel.synthetic import SYNTHETIC_PORT, VERSION, synthetic_address

from ..services.nginxfront import Front, secret_path
from .base import (
    PT_METHODS_S,
    CellContext,
    Endpoint,
    LabPlugin,
    Service,
    peer_missing,
    peer_path,
    pt_client_service,
    pt_client_socks,
)

SITE_NAME = "bridge.lab"
FRONT_PORT = 443  # nginx, on every bridge address
BACKEND_PORT = 15000  # our server, on the bridge's loopback
PT_CMD = [sys.executable, "-m", "transports.pt"]
OPTIONS = {"sni_imitation": "sni-imitation", "servername": "servername"}
#: The real peer binary of each side's implementations (None: ours).
CLIENTS = {"ptlab": None, "lyrebird": "lyrebird"}
SERVERS = {"ptlab": None, "tor": "webtunnel-server"}
SIDES = {"client": CLIENTS, "server": SERVERS}


def site_url(ctx: CellContext) -> str:
    return f"https://{SITE_NAME}/{secret_path(ctx.seed)}"


def front(ctx: CellContext, backend_port: int = BACKEND_PORT) -> Front:
    """The cell's nginx: the site, the bridge's certificate, the secret path."""
    addrs = [ctx.lab.addr("bridge"), ctx.lab.addr("bridge", v6=True)]
    cert, key = ctx.issue_cert("WebTunnel's rows (the bridge's certificate)", [SITE_NAME],
                               addrs, "webtunnel-bridge")
    listen = tuple(f"[{a}]:{FRONT_PORT}" if ":" in a else f"{a}:{FRONT_PORT}" for a in addrs)
    return Front(ctx.workdir / "webtunnel-nginx", listen, SITE_NAME, cert, key,
                 secret_path(ctx.seed), backend_port).write()


def front_service(ctx: CellContext, backend_port: int = BACKEND_PORT) -> Service:
    """nginx under :mod:`ptlab.processes.extlaunch`: it prints nothing when ready, so the
    launcher says so once port 443 accepts."""
    site = front(ctx, backend_port)
    return Service("webtunnel-nginx", "bridge", ctx.py(
        "ptlab.processes.extlaunch", "--ready-port", f"{ctx.lab.addr('bridge')}:{FRONT_PORT}",
        "--component", "webtunnel-nginx", "--", *site.argv()))


class WebTunnelPlugin(LabPlugin):
    def __init__(self, name: str, description: str, **defaults: str) -> None:
        self.name, self.description = name, description
        self.defaults = defaults  # option -> value

    def check_options(self, options: dict[str, Any]) -> None:
        known = set(OPTIONS) | set(SIDES)
        unknown = set(options) - known
        if unknown:
            raise ValueError(f"unknown option {sorted(unknown)[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
        for key, value in options.items():
            if not isinstance(value, str) or any(c.isspace() for c in value):
                raise ValueError(f"{key} must be a name with no spaces, not {value!r}")
        for side, impls in SIDES.items():
            impl = options.get(side, self.defaults.get(side, "ptlab"))
            if impl not in impls:
                raise ValueError(f"{side}: unknown implementation {impl!r} "
                                 f"(known: {', '.join(impls)})")
            binary = impls[impl]
            if binary and peer_path(binary) is None:
                raise ValueError(peer_missing(side, binary))

    def _cmd(self, ctx: CellContext, side: str) -> list[str]:
        binary = SIDES[side][ctx.options.get(side, self.defaults.get(side, "ptlab"))]
        return [peer_path(binary) or binary] if binary else PT_CMD

    def servers(self, ctx: CellContext) -> list[Service]:
        host, port = ctx.upstream
        server = Service("webtunnel-server", "bridge", ctx.py(
            "ptlab.processes.ptparent", "server", "--transport", "webtunnel",
            "--timeout", ctx.seconds(PT_METHODS_S),
            "--state", str(ctx.workdir / "webtunnel-server-state"),
            "--info", str(ctx.workdir / "webtunnel-server.json"),
            "--bind", f"127.0.0.1:{BACKEND_PORT}", "--orport", f"{host}:{port}",
            "--option", f"url={site_url(ctx)}", "--", *self._cmd(ctx, "server")))
        return [server, front_service(ctx)]

    def clients(self, ctx: CellContext) -> list[Service]:
        return [pt_client_service(ctx, self.name, "webtunnel", self._cmd(ctx, "client"))]

    def endpoint(self, ctx: CellContext) -> Endpoint:
        host, port = pt_client_socks(ctx, self.name)
        args = {"url": site_url(ctx), "ver": VERSION}  # as the server's bridge line has them
        for option, arg in OPTIONS.items():
            if value := ctx.options.get(option, self.defaults.get(option, "")):
                args[arg] = value
        # The bridge line's address is a placeholder derived from the url (§4).
        return Endpoint(host, port, str(synthetic_address(args["url"])), SYNTHETIC_PORT, args)

    def peer_binaries(self) -> list[str]:
        return ["nginx", *(b for side, impls in SIDES.items()
                           if (b := impls[self.defaults.get(side, "ptlab")]))]


WEBTUNNEL = WebTunnelPlugin("webtunnel", "ptlab's WebTunnel client and server behind Debian "
                            "nginx (a small real site; only the secret path is proxied)")
WEBTUNNEL_IMITATION = WebTunnelPlugin(
    "webtunnel-imitation", "ptlab's WebTunnel with sni-imitation=www.benign.lab: the SNI "
    "names another site, the certificate is still checked for bridge.lab",
    sni_imitation="www.benign.lab")
WEBTUNNEL_LYREBIRD = WebTunnelPlugin(
    "webtunnel-lyrebird", "lyrebird's WebTunnel client (Tor's current PT) through Debian "
    "nginx to ptlab's WebTunnel server", client="lyrebird")
WEBTUNNEL_TOR_SERVER = WebTunnelPlugin(
    "webtunnel-tor-server", "ptlab's WebTunnel client through Debian nginx to Tor's own "
    "WebTunnel server (scripts/setup --peers)", server="tor")
