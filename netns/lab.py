"""Bringing a topology up as real namespaces, and taking it down again.

``Lab.up()`` creates one namespace per node, one veth pair per link (made
directly inside the two namespaces, so nothing ever sits in the root
namespace), addresses, routes and forwarding; ``Lab.down()`` kills every
process in the lab's namespaces and deletes them. Cleanup after a crash is in
:mod:`netns.cleanup` and works from names alone.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from . import cleanup, ownership
from .errors import LabError
from .names import check_lab_id, if_name, ns_name
from .sh import require_root, require_tools, run
from .topology import Topology

ETC_NETNS = Path("/etc/netns")

#: The source ports the kernel picks from in every lab namespace (Linux's default,
#: set explicitly): ports above it are left for flows the lab opens and labels.
EPHEMERAL_PORTS = (32768, 60999)


class Lab:
    """A running (or about to run) lab: a topology, an id, and its namespaces."""

    def __init__(self, topology: Topology, lab_id: str | None = None) -> None:
        self.topology = topology
        self.id = check_lab_id(lab_id) if lab_id else None
        self.is_up = False

    # --- names ---------------------------------------------------------------

    def ns(self, role: str) -> str:
        if role not in self.topology.nodes:
            raise LabError(f"no node {role!r} in this lab")
        assert self.id is not None
        return ns_name(self.id, role)

    def iface(self, role: str, peer: str) -> str:
        """The interface in `role`'s namespace that faces `peer`."""
        assert self.id is not None
        return if_name(self.id, self.topology.nodes[peer].code)

    def addr(self, role: str, v6: bool = False) -> str:
        return self.topology.addr(role, v6)

    @property
    def state_dir(self) -> Path:
        assert self.id is not None
        return ownership.state_dir(self.id)

    # --- lifecycle -------------------------------------------------------------

    def up(self, detached: bool = False) -> Lab:
        """Create everything. On any failure, remove what was made and re-raise."""
        require_root()
        require_tools("ip")
        self.id = ownership.claim_lab(self.id)
        (self.state_dir / "topology.json").write_text(json.dumps(self.topology.to_dict()))
        try:
            self._create()
        except BaseException:
            cleanup.down(self.id)
            raise
        if detached:
            ownership.write_owner(self.id, detached=True)
        self.is_up = True
        return self

    def down(self) -> None:
        if self.id is not None:
            cleanup.down(self.id)
        self.is_up = False

    def __enter__(self) -> Lab:
        return self.up() if not self.is_up else self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # --- creation ------------------------------------------------------------

    def _create(self) -> None:
        topo = self.topology
        for role, node in topo.nodes.items():
            run(["ip", "netns", "add", self.ns(role)])
            # Before any interface exists, so veths inherit "no DAD" and their
            # addresses (link-local too) are usable at once.
            self._sysctls(role, node.router)
        # veth pairs straight into their namespaces: one batch.
        batch = []
        for lk in topo.links:
            batch.append(
                f"link add {self.iface(lk.a, lk.b)} netns {self.ns(lk.a)} type veth "
                f"peer name {self.iface(lk.b, lk.a)} netns {self.ns(lk.b)}"
            )
        run(["ip", "-batch", "-"], input="\n".join(batch) + "\n")
        hosts = self._hosts_file()
        for role in topo.nodes:
            self._configure_node(role)
        self._settle()
        for role in topo.nodes:
            d = ETC_NETNS / self.ns(role)
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text(hosts)
            # Until the lab resolver is up, resolv.conf points at nothing real
            # inside the lab, so no lookup can leave it.
            svc = topo.addr("svc") if "svc" in topo.nodes else "127.0.0.1"
            (d / "resolv.conf").write_text(f"nameserver {svc}\noptions timeout:1 attempts:1\n")

    def _settle(self, timeout: float = 5.0) -> None:
        """Wait until every veth is operationally up.

        The kernel applies carrier changes through linkwatch, up to a second
        late; until then IPv6 neighbour discovery fails on that link.
        """
        deadline = time.monotonic() + timeout
        pending = list(self.topology.nodes)
        while pending and time.monotonic() < deadline:
            still = []
            for role in pending:
                out = run(["ip", "-n", self.ns(role), "-o", "link", "show"]).stdout
                veths = [ln for ln in out.splitlines() if ": lo:" not in ln]
                if not all("state UP" in ln for ln in veths):
                    still.append(role)
            pending = still
            if pending:
                time.sleep(0.05)
        if pending:
            raise LabError(f"links of {', '.join(pending)} did not come up in {timeout:.0f}s")

    def _sysctls(self, role: str, router: bool) -> None:
        low, high = EPHEMERAL_PORTS
        sysctls = [
            # Explicit, so ports above it are free for flows the lab labels itself.
            f"net.ipv4.ip_local_port_range={low} {high}",
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
            "net.ipv6.conf.all.accept_ra=0",
            "net.ipv6.conf.default.accept_ra=0",
            f"net.ipv4.ip_forward={1 if router else 0}",
            f"net.ipv6.conf.all.forwarding={1 if router else 0}",
            # Routers must not drop asymmetric or phantom-destined packets.
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
        ]
        run(["ip", "netns", "exec", self.ns(role), "sysctl", "-q", "-w", *sysctls])

    def _configure_node(self, role: str) -> None:
        ns = self.ns(role)
        topo = self.topology
        cmds = ["link set lo up"]
        for lk in topo.links_of(role):
            dev = self.iface(role, lk.other(role))
            cmds.append(f"addr add {lk.v4(role)}/24 dev {dev}")
            cmds.append(f"addr add {lk.v6(role)}/64 dev {dev} nodad")
            cmds.append(f"link set {dev} up")
        for prefix in topo.nodes[role].extra_prefixes:
            cmds.append(f"route add local {prefix} dev lo")
        for r in topo.routes(role):
            dev = self.iface(role, r.peer)
            cmds.append(f"route add {r.dest} via {r.via} dev {dev}")
        run(["ip", "-n", ns, "-batch", "-"], input="\n".join(cmds) + "\n")
        # A fresh veth loses the first neighbour solicitation now and then;
        # retry after 100 ms rather than the default second.
        devs = [self.iface(role, lk.other(role)) for lk in topo.links_of(role)]
        if devs:
            run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                 *[f"net.ipv6.neigh.{d}.retrans_time_ms=100" for d in devs]])

    def _hosts_file(self) -> str:
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        for role in self.topology.nodes:
            if self.topology.links_of(role):
                lines.append(f"{self.topology.addr(role)} {role}.lab")
                lines.append(f"{self.topology.addr(role, v6=True)} {role}.lab")
        return "\n".join(lines) + "\n"

    # --- helpers ---------------------------------------------------------------

    def exec(self, role: str, argv: list[str], **kw):
        """Run a short command in `role`'s namespace and return the result."""
        return run(["ip", "netns", "exec", self.ns(role), *argv], **kw)

    def nft(self, role: str, script: str) -> None:
        """Load an nft script into `role`'s namespace."""
        require_tools("nft")
        run(["ip", "netns", "exec", self.ns(role), "nft", "-f", "-"], input=script)

    @classmethod
    def attach(cls, lab_id: str) -> Lab:
        """A handle on a lab that is already up (for lab exec/status)."""
        path = ownership.state_dir(lab_id) / "topology.json"
        try:
            topo = Topology.from_dict(json.loads(path.read_text()))
        except OSError as exc:
            raise LabError(f"no lab {lab_id!r} (ptlab lab status lists them)") from exc
        lab = cls(topo, lab_id)
        lab.is_up = True
        return lab
