"""The three machines as three network namespaces on this one (``ptlab vm run --split``).

Each machine of :mod:`ptlab.vm.layout` becomes a namespace ``ptl<id>-client``,
``-censor`` or ``-servers`` with the VM's addresses, routes and forwarding, and
a veth where the VM has a private network. The runner then drives them with
exactly the commands it sends to the VMs. Cleanup is the namespace lab's:
the lab id is claimed and owned the same way, so ``ptlab lab down`` removes
a split that a crash left behind.
"""

from __future__ import annotations

from pathlib import Path

from netns import cleanup, ownership
from netns.names import check_lab_id, if_name, ns_name
from netns.sh import require_root, require_tools, run

from .hosts import NamespaceHost
from .layout import INSIDE, MACHINES, PREFIXLEN, SERVER_ROLE_ADDRESSES

ETC_NETNS = Path("/etc/netns")
# Interface codes: the machine at the other end of the veth.
CODES = {"client": "c", "censor": "x", "servers": "s"}


class SplitMachines:
    """Three namespaces laid out as the VMs; use as a context manager, or up()/down()."""

    slowdown = 1.0  # the host's own kernel and CPU

    def __init__(self, python: str, lab_id: str | None = None) -> None:
        self.python = python
        self.id = check_lab_id(lab_id) if lab_id else None
        self.hosts: dict[str, NamespaceHost] = {}

    @property
    def state_dir(self) -> Path:
        assert self.id is not None
        return ownership.state_dir(self.id)

    def up(self) -> SplitMachines:
        require_root()
        require_tools("ip")
        self.id = ownership.claim_lab(self.id)
        try:
            self._create()
        except BaseException:
            cleanup.down(self.id)
            raise
        self.hosts = {m: NamespaceHost(m, ns_name(self.id, m), self.python) for m in MACHINES}
        return self

    def down(self) -> None:
        if self.id is not None:
            cleanup.down(self.id)

    def __enter__(self) -> SplitMachines:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def _create(self) -> None:
        assert self.id is not None
        lab_id = self.id
        for m in MACHINES:
            ns = ns_name(lab_id, m)
            run(["ip", "netns", "add", ns])
            fwd = 1 if m == "censor" else 0
            run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"net.ipv4.ip_forward={fwd}",
                 "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
                 "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])
        # One veth per private network, between the censor and the machine on it.
        for other in ("client", "servers"):
            run(["ip", "link", "add", if_name(lab_id, CODES["censor"]), "netns",
                 ns_name(lab_id, other), "type", "veth", "peer", "name",
                 if_name(lab_id, CODES[other]), "netns", ns_name(lab_id, "censor")])
        for m, machine in MACHINES.items():
            cmds = ["link set lo up"]
            for net, addr in machine.nets:
                peer = "censor" if m != "censor" else ("client" if net == INSIDE else "servers")
                dev = if_name(lab_id, CODES[peer])
                cmds += [f"addr add {addr}/{PREFIXLEN} dev {dev}", f"link set {dev} up"]
            if machine.route:
                dest, via = machine.route
                cmds.append(f"route add {dest} via {via}")
            run(["ip", "-n", ns_name(lab_id, m), "-batch", "-"], input="\n".join(cmds) + "\n")
        names = "\n".join(f"{a} {r}.lab" for r, a in SERVER_ROLE_ADDRESSES.items())
        for m in MACHINES:
            d = ETC_NETNS / ns_name(lab_id, m)
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text(f"127.0.0.1 localhost\n{names}\n")
            (d / "resolv.conf").write_text(f"nameserver {SERVER_ROLE_ADDRESSES['svc']}\n"
                                           "options timeout:1 attempts:1\n")
