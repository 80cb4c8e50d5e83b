"""The lab plugin contract.

A plugin declares: the services it needs and in which namespaces
(:meth:`LabPlugin.servers`, :meth:`LabPlugin.clients`), any topology
extensions (:meth:`LabPlugin.extend_topology`), how to start each role (a
:class:`Service` is an argv for one process), and how to tell it is ready (a
regex over the process log, by default the ``ready`` event). The workloads
reach a transport through its client's SOCKS5 front (:class:`Endpoint`), as
Tor does.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netns.topology import Topology
from ptcommon.events import READY_PATTERN

from ..common import tools
from ..common.labview import LabView


@dataclass
class Service:
    """One process of a plugin: where it runs, what it runs, when it is ready."""

    name: str
    role: str
    argv: list[str]
    ready: str = READY_PATTERN
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 15.0
    # What readiness means, for the timeout's message ("ready (waited for ...)"; by
    # default the pattern), and a hint that names what changes it.
    ready_what: str | None = None
    ready_hint: str = ""


@dataclass
class Endpoint:
    """How a workload reaches the transport: SOCKS5 in the client namespace."""

    socks_host: str
    socks_port: int
    target_host: str
    target_port: int
    args: dict[str, str] = field(default_factory=dict)
    # False for a VPN row: no SOCKS front; the workloads connect to the target
    # directly and the lab's routes take them through the tunnel.
    socks: bool = True
    # With a CA file, the workloads speak TLS to the target (named inner_tls_host)
    # inside the transport (workloads.inner_tls).
    inner_tls_ca: str | None = None
    inner_tls_host: str = "web.lab"


@dataclass
class CellContext:
    """What a plugin may use to build its processes for one cell."""

    lab: LabView  # the namespace lab, or the three machines (vm_ready plugins only)
    workdir: Path  # state directories and config files for this cell
    options: dict[str, Any]  # the spec's [transports.<name>] table
    seed: int
    upstream: tuple[str, int]  # where bridges relay to (the web node's HTTP server)
    lab_ca: Path | None = None  # the lab CA's root certificate, which lab clients trust
    lab_dir: Path | None = None  # lab-wide state shared by cells (the private Tor network)
    python: str = sys.executable
    # Above 1 on emulated machines (qemu's TCG): a process's own waits, such as
    # ptparent's for a PT's method lines, stretch by as much as the lab's do.
    timeout_scale: float = 1.0

    def seconds(self, base: float) -> str:
        """`base` seconds of a process's own wait, stretched by the machines'
        slowdown, as a command-line argument."""
        return f"{base * self.timeout_scale:g}"

    def py(self, *module_args: str) -> list[str]:
        return [self.python, "-m", *module_args]

    def issue_cert(self, who: str, names: list[str], addrs: list[str],
                   stem: str) -> tuple[Path, Path]:
        """A server certificate (leaf and root) and key from the lab CA for ``names``
        and ``addrs``, which the lab's clients trust; reused while they stay the same.
        ``who`` names what needs it in the error when the lab has no CA."""
        from netns.errors import LabError

        from ..services.ca import LabCA

        if self.lab_ca is None:
            raise LabError(f"{who} needs the lab CA, and this lab has none")
        return LabCA.load_or_create(Path(self.lab_ca).parent).issue(names, addrs, stem)


#: How long ptparent waits for a PT's method lines (its --timeout), on this machine.
PT_METHODS_S = 20.0


def pt_client_service(ctx: CellContext, name: str, transport: str, cmd: list[str]) -> Service:
    """A client PT (ours or a real binary) in managed mode under ``ptlab.processes.ptparent`` in
    the client namespace; it trusts the lab CA (the edge's certificate)."""
    argv = ctx.py("ptlab.processes.ptparent", "client", "--transport", transport,
                  "--timeout", ctx.seconds(PT_METHODS_S),
                  "--state", str(ctx.workdir / f"{name}-client-state"),
                  "--info", str(ctx.workdir / f"{name}-client.json"), "--", *cmd)
    env = {"SSL_CERT_FILE": str(ctx.lab_ca)} if ctx.lab_ca else {}
    return Service(f"{name}-client", "client", argv, env=env)


def peer_path(binary: str) -> str | None:
    """Where a real peer's binary is: a peer built by ``scripts/setup --peers``
    (lyrebird, Snowflake's current release...) or one on PATH (Debian's)."""
    try:
        return tools.locate(binary)[0]
    except tools.ToolError:
        return None


def peer_missing(side: str, binary: str) -> str:
    """The message of a row whose real peer is absent."""
    return (f"{side}: needs {binary}, which is neither installed (scripts/setup) "
            f"nor built (scripts/setup --peers)")


def pt_client_socks(ctx: CellContext, name: str) -> tuple[str, int]:
    """Where the client PT of :func:`pt_client_service` listens (its CMETHOD)."""
    info = json.loads((ctx.workdir / f"{name}-client.json").read_text())
    host, _, port = info["methods"][0]["addr"].rpartition(":")
    return host, int(port)


class LabPlugin:
    """Base class: override what the transport needs."""

    name = "?"
    description = ""
    # The least time a row of this plugin gets for its first request (the spec's
    # workloads.bootstrap_timeout_s applies when larger): tor builds circuits first.
    bootstrap_floor_s = 0.0
    # Whether the row runs on the three-machine layout (ptlab vm): its processes
    # use only the client and bridge roles, which the VMs have.
    vm_ready = False
    # Whether the transport's own traffic goes through the lab resolver (a DNS
    # tunnel): then the client's flows to it are the transport's, not infrastructure.
    resolver_is_wire = False

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError naming a bad key in [transports.<name>]."""
        if options:
            raise ValueError(f"unknown option {sorted(options)[0]!r}")

    def extend_topology(self, topology: Topology, options: dict[str, Any]) -> None:
        """Add phantom prefixes, extra nodes... (nothing by default)."""

    def servers(self, ctx: CellContext) -> list[Service]:
        return []

    def clients(self, ctx: CellContext) -> list[Service]:
        return []

    def endpoint(self, ctx: CellContext) -> Endpoint:
        raise NotImplementedError

    def peer_binaries(self) -> list[str]:
        """Real-peer binaries this plugin runs (their versions go into provenance)."""
        return []

    def needed_binaries(self, options: dict[str, Any]) -> list[str]:
        """The programs a row with these options runs, which must be on PATH (by
        default, its peer binaries)."""
        return self.peer_binaries()

    def missing(self, options: dict[str, Any]) -> str | None:
        """What this row needs and this machine lacks, in one line, or None: a binary
        not on PATH, or a tool that cannot be found."""
        missing = [b for b in self.needed_binaries(options) if peer_path(b) is None]
        if missing:
            return (f"{', '.join(missing)} not installed: install "
                    f"{'it' if len(missing) == 1 else 'them'}, or fix the row's "
                    "`binaries` (scripts/setup installs the Debian tools ptlab's own "
                    "rows use; scripts/setup --peers builds the real peers)")
        for name in self.tools():
            try:
                self.resolve_tool(name)
            except OSError as exc:
                return str(exc)
        return None

    def tools(self) -> list[str]:
        """Tools found through :mod:`ptlab.common.tools` (provenance records each build)."""
        return []

    def resolve_tool(self, name: str) -> Any:
        """The :class:`ptlab.common.tools.Tool` this row runs as ``name``."""
        raise KeyError(name)

    def skip_reason(self) -> str | None:
        """Why this row cannot run here at all (every cell of it is then reported
        as skipped, with this reason), or None."""
        return None

    def notes(self, ctx: CellContext) -> list[str]:
        """What the cell's row should say about this transport once it has run
        (read from its processes' logs), e.g. tor's bootstrap."""
        return []
