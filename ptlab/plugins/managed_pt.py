"""Lab plugins for transports run in Tor PT managed mode: ours and real peers alike.

Each side runs under :mod:`ptlab.processes.ptparent`, which plays tor's parent role and
publishes the PT's SOCKS port (client) or bridge ARGS (server). The ``obfs4``
row runs our obfs4 through ``python -m transports.pt``; the ``obfs4proxy``
row runs Debian's obfs4proxy in the same slots, so the two are compared on
equal terms and either side can be swapped for the other.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from transports.obfs4.statefile import load_or_create
from transports.obfs4.transport import FIRST_SEGMENT_ARG, MAX_FIRST_SEGMENT

from .base import PT_METHODS_S, CellContext, Endpoint, LabPlugin, Service, peer_missing, peer_path

BRIDGE_PORT = 9002


class ManagedPTPlugin(LabPlugin):
    """One transport; each side is one of `implementations` (a PT command).

    Options: ``iat_mode`` (0, 1, 2), and ``client`` / ``server`` naming the
    implementation of each side, so ``[transports.obfs4] client = "obfs4proxy"``
    is an interop run (obfs4proxy's client against our server).
    ``first_segment`` (obfs4 with our client only; 0 = off, else 1..1448) has the
    client send the first N bytes of its hello as a TCP segment of their own
    (the ``first-segment=N`` SOCKS argument; see transports/obfs4/transport.py).
    """

    vm_ready = True  # a client and a bridge: the three machines have both

    def __init__(self, name: str, transport: str, implementations: dict[str, list[str]],
                 default: str, description: str, client: str | None = None,
                 servers: tuple[str, ...] | None = None, first_segment: int = 0) -> None:
        self.name, self.transport, self.description = name, transport, description
        # A row's own default for the option (obfs4-split), which a spec may override.
        self.first_segment = first_segment
        self.implementations, self.default = implementations, default
        # Per-side defaults and, where a peer has no server, who may serve.
        self.defaults = {"client": client or default, "server": default}
        self.servers_allowed = servers

    def check_options(self, options: dict[str, Any]) -> None:
        known = {"iat_mode", "client", "server", "first_segment"}
        unknown = set(options) - known
        if unknown:
            raise ValueError(f"unknown option {sorted(unknown)[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
        if options.get("iat_mode", 0) not in (0, 1, 2):
            raise ValueError("iat_mode must be 0, 1 or 2")
        self._check_first_segment(options)
        for side in ("client", "server"):
            impl = options.get(side, self.defaults[side])
            if impl not in self.implementations:
                raise ValueError(f"{side}: unknown implementation {impl!r} "
                                 f"(known: {', '.join(self.implementations)})")
            if side == "server" and self.servers_allowed and impl not in self.servers_allowed:
                raise ValueError(f"server: {impl} has no {self.transport} server "
                                 f"(servers: {', '.join(self.servers_allowed)})")
            binary = self.implementations[impl][0]
            if impl != "ptlab" and peer_path(binary) is None:
                raise ValueError(peer_missing(side, binary))

    def _check_first_segment(self, options: dict[str, Any]) -> None:
        if "first_segment" not in options:
            return
        n = options["first_segment"]
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_FIRST_SEGMENT:
            raise ValueError(f"first_segment must be an integer in 0..{MAX_FIRST_SEGMENT} "
                             f"(0 = off), not {n!r}")
        if self.transport != "obfs4":
            raise ValueError(f"first_segment is for obfs4 only, not {self.transport}")
        if options.get("client", self.defaults["client"]) != "ptlab":
            raise ValueError('first_segment needs client = "ptlab"')

    def _cmd(self, ctx: CellContext, side: str) -> list[str]:
        name = ctx.options.get(side, self.defaults[side])
        if name == "ptlab":
            # The Python of the machine the PT runs on (a VM's is not this one's).
            return ctx.py("transports.pt")
        binary, *rest = self.implementations[name]
        return [peer_path(binary) or binary, *rest]

    def _parent(self, ctx: CellContext, role: str, cmd: list[str], *extra: str) -> list[str]:
        return ctx.py("ptlab.processes.ptparent", role, "--transport", self.transport,
                      "--timeout", ctx.seconds(PT_METHODS_S),
                      "--state", str(ctx.workdir / f"{self.name}-{role}-state"),
                      "--info", str(ctx.workdir / f"{self.name}-{role}.json"),
                      *extra, "--", *cmd)

    def servers(self, ctx: CellContext) -> list[Service]:
        host, port = ctx.upstream
        iat = ctx.options.get("iat_mode", 0)
        if self.transport == "obfs4":
            # Our state generator draws a seed whose length table lacks 0, on
            # which obfs4proxy panics in iat-mode 2; obfs4proxy adopts the file.
            load_or_create(ctx.workdir / f"{self.name}-server-state")
        argv = self._parent(ctx, "server", self._cmd(ctx, "server"),
                            "--bind", f"0.0.0.0:{BRIDGE_PORT}", "--orport", f"{host}:{port}",
                            "--option", f"iat-mode={iat}")
        return [Service(f"{self.name}-server", "bridge", argv)]

    def clients(self, ctx: CellContext) -> list[Service]:
        return [Service(f"{self.name}-client", "client",
                        self._parent(ctx, "client", self._cmd(ctx, "client")))]

    def endpoint(self, ctx: CellContext) -> Endpoint:
        server = json.loads((ctx.workdir / f"{self.name}-server.json").read_text())
        client = json.loads((ctx.workdir / f"{self.name}-client.json").read_text())
        args = dict(server["methods"][0]["args"])
        # SOCKS arguments reach the client only; this one is ptlab's (checked above).
        first = ctx.options.get("first_segment", self.first_segment)
        if first and ctx.options.get("client", self.defaults["client"]) == "ptlab":
            args[FIRST_SEGMENT_ARG] = str(first)
        host, _, port = client["methods"][0]["addr"].rpartition(":")
        return Endpoint(host, int(port), ctx.lab.addr("bridge"), BRIDGE_PORT, args)

    def peer_binaries(self) -> list[str]:
        return [cmd[0] for name, cmd in self.implementations.items() if name != "ptlab"]

    def needed_binaries(self, options: dict[str, Any]) -> list[str]:
        """The real peers this row's sides run (none when both are ours)."""
        impls = {options.get(side, self.defaults[side]) for side in ("client", "server")}
        return sorted({self.implementations[i][0] for i in impls
                       if i != "ptlab" and i in self.implementations})


OBFS4_IMPLEMENTATIONS = {
    "ptlab": [sys.executable, "-m", "transports.pt"],
    "obfs4proxy": ["obfs4proxy"],
    # Tor's current PT (obfs4proxy's successor), from scripts/setup --peers.
    "lyrebird": ["lyrebird"],
}
OBFS4 = ManagedPTPlugin("obfs4", "obfs4", OBFS4_IMPLEMENTATIONS, "ptlab",
                        "ptlab's obfs4 in Tor PT managed mode (either side swappable)")
# The same obfs4 with its hello's first 100 bytes in a segment of their own: under
# the 149 bytes Wang et al.'s entropy test needs, for one extra packet (ml-2015).
OBFS4_SPLIT = ManagedPTPlugin("obfs4-split", "obfs4", OBFS4_IMPLEMENTATIONS, "ptlab",
                              "ptlab's obfs4 sending its first 100 hello bytes as a segment "
                              "of their own (first-segment=100)", first_segment=100)
OBFS4PROXY = ManagedPTPlugin("obfs4proxy", "obfs4", OBFS4_IMPLEMENTATIONS, "obfs4proxy",
                             "Debian's obfs4proxy, the reference implementation")
LYREBIRD = ManagedPTPlugin("lyrebird", "obfs4", OBFS4_IMPLEMENTATIONS, "lyrebird",
                           "lyrebird, Tor's current obfs4 (built from its Go module by "
                           "scripts/setup --peers)")
# obfs4proxy 0.0.14 ships ScrambleSuit's client only: our server on both rows.
SCRAMBLESUIT = ManagedPTPlugin("scramblesuit", "scramblesuit", OBFS4_IMPLEMENTATIONS, "ptlab",
                               "ptlab's ScrambleSuit (UniformDH, session tickets) in Tor PT "
                               "managed mode", servers=("ptlab",))
SCRAMBLESUIT_OBFS4PROXY = ManagedPTPlugin(
    "scramblesuit-obfs4proxy", "scramblesuit", OBFS4_IMPLEMENTATIONS, "ptlab",
    "Debian obfs4proxy's ScrambleSuit client against our server", client="obfs4proxy",
    servers=("ptlab",))
