"""The meek rows: a client behind the censor, the lab's TLS edge as the CDN, our server.

Where each piece runs:

* our meek server (``python -m transports.meek.server``) on the bridge node,
  plain HTTP behind the edge, trusting only the edge's ``Meek-IP``, relaying
  each session to the lab's upstream;
* the edge in the cdn namespace serves ``meek.lab`` through a reflector route
  (only meek's headers pass), beside the benign sites on the same front;
* the client in PT managed mode in the client namespace: ours (``meek``) or
  Debian obfs4proxy's ``meek_lite``. It connects to ``front`` (TLS SNI
  ``front.lab``) and names ``meek.lab`` only in the encrypted Host header.

Options (``[transports.<name>]``): ``client`` (``ptlab``, ``obfs4proxy`` or
``lyrebird``, the row ``meek-lite-lyrebird``: Tor's current PT, built by
``scripts/setup --peers``),
``front`` (default ``front.lab``; ``""`` for no fronting, so SNI is
``meek.lab``), and ``tls`` for our client (``python``, or a curl_cffi browser
profile such as ``chrome``; the ``meek-chrome`` row defaults to ``chrome``).
"""

from __future__ import annotations

import sys
from typing import Any

from ..common.wellknown import MEEK_EDGE_NAME, MEEK_PORT
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

DEFAULT_FRONT = "front.lab"
IMPLEMENTATIONS = {"ptlab": ("meek", [sys.executable, "-m", "transports.pt"]),
                   "obfs4proxy": ("meek_lite", ["obfs4proxy"]),
                   # Tor's current PT, from scripts/setup --peers.
                   "lyrebird": ("meek_lite", ["lyrebird"])}


class MeekPlugin(LabPlugin):
    def __init__(self, name: str, client: str, description: str, tls: str | None = None) -> None:
        self.name, self.default_client, self.description = name, client, description
        self.default_tls = tls

    def check_options(self, options: dict[str, Any]) -> None:
        known = {"client", "front", "tls"}
        unknown = set(options) - known
        if unknown:
            raise ValueError(f"unknown option {sorted(unknown)[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
        impl = options.get("client", self.default_client)
        if impl not in IMPLEMENTATIONS:
            raise ValueError(f"client: unknown implementation {impl!r} "
                             f"(known: {', '.join(IMPLEMENTATIONS)})")
        binary = IMPLEMENTATIONS[impl][1][0]
        if impl != "ptlab" and peer_path(binary) is None:
            raise ValueError(peer_missing("client", binary))
        if "tls" in options and impl != "ptlab":
            raise ValueError("tls: only our client chooses its TLS (meek_lite uses Go's)")
        for key in ("front", "tls"):
            if key in options and not isinstance(options[key], str):
                raise ValueError(f"{key} must be a string")

    def _impl(self, ctx: CellContext) -> str:
        return ctx.options.get("client", self.default_client)

    def servers(self, ctx: CellContext) -> list[Service]:
        host, port = ctx.upstream
        return [Service("meek-server", "bridge", ctx.py(
            "transports.meek.server", "--listen", f"{ctx.lab.addr('bridge')}:{MEEK_PORT}",
            "--dest", f"{host}:{port}", "--trusted-edge", ctx.lab.addr("cdn")))]

    def clients(self, ctx: CellContext) -> list[Service]:
        transport, (binary, *rest) = IMPLEMENTATIONS[self._impl(ctx)]
        if self._impl(ctx) != "ptlab":
            binary = peer_path(binary) or binary
        cmd = [binary, *rest]
        return [pt_client_service(ctx, self.name, transport, cmd)]

    def endpoint(self, ctx: CellContext) -> Endpoint:
        host, port = pt_client_socks(ctx, self.name)
        args = {"url": f"https://{MEEK_EDGE_NAME}/"}
        front = ctx.options.get("front", DEFAULT_FRONT)
        if front:
            args["front"] = front
        tls = ctx.options.get("tls", self.default_tls)
        if self._impl(ctx) == "ptlab" and tls:
            args["tls"] = tls
        # The bridge address in a meek bridge line is a placeholder (0.0.2.0:1).
        return Endpoint(host, port, "0.0.2.0", 1, args)

    def peer_binaries(self) -> list[str]:
        if self.default_client == "ptlab":
            return []
        return [IMPLEMENTATIONS[self.default_client][1][0]]


MEEK = MeekPlugin("meek", "ptlab", "ptlab's meek client (TLS: Python's ssl) through the lab's "
                  "edge (fronted) to our meek server")
MEEK_CHROME = MeekPlugin("meek-chrome", "ptlab", "ptlab's meek client with Chrome's ClientHello "
                         "(curl_cffi) through the lab's edge (fronted) to our meek server",
                         tls="chrome")
MEEK_LITE = MeekPlugin("meek-lite", "obfs4proxy", "Debian obfs4proxy's meek_lite client "
                       "through the lab's edge (fronted) to our meek server")
MEEK_LITE_LYREBIRD = MeekPlugin("meek-lite-lyrebird", "lyrebird", "lyrebird's meek_lite client "
                                "(Tor's current PT) through the lab's edge (fronted) to our "
                                "meek server")
