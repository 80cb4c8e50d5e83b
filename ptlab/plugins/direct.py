"""The ``direct`` row: plain TCP from a SOCKS5 front to a relay on the bridge."""

from __future__ import annotations

from .base import CellContext, Endpoint, LabPlugin, Service

BRIDGE_PORT = 9001
SOCKS_PORT = 1080


class DirectPlugin(LabPlugin):
    name = "direct"
    description = "Plain TCP relay: no disguise at all (the baseline)."
    vm_ready = True

    def servers(self, ctx: CellContext) -> list[Service]:
        host, port = ctx.upstream
        return [Service("direct-server", "bridge", ctx.py(
            "transports.lab_mode", "server", "--transport", "direct",
            "--listen", f"0.0.0.0:{BRIDGE_PORT}", "--listen", f"[::]:{BRIDGE_PORT}",
            "--upstream", f"{host}:{port}"))]

    def clients(self, ctx: CellContext) -> list[Service]:
        return [Service("direct-client", "client", ctx.py(
            "transports.lab_mode", "client", "--transport", "direct",
            "--socks", f"127.0.0.1:{SOCKS_PORT}"))]

    def endpoint(self, ctx: CellContext) -> Endpoint:
        return Endpoint("127.0.0.1", SOCKS_PORT, ctx.lab.addr("bridge"), BRIDGE_PORT)


PLUGIN = DirectPlugin()
