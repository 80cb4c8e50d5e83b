"""The three-machine layout: who holds which address, and where each lab role runs.

The Vagrantfile builds these machines (a test checks that both agree). The
censor holds .2 on both networks because a libvirt host bridge may take .1.
Every server role has an address of its own on the servers machine, so an
IP blocklist can block the bridge without blocking the web, as in the
namespace lab. The layout is IPv4-only: the Vagrant networks carry no IPv6.
"""

from __future__ import annotations

from dataclasses import dataclass

from netns.errors import LabError

INSIDE, OUTSIDE = "ptl-inside", "ptl-outside"
INSIDE_NET, OUTSIDE_NET = "198.18.100.0/24", "198.18.101.0/24"
PREFIXLEN = 24


@dataclass(frozen=True)
class Machine:
    name: str
    nets: tuple[tuple[str, str], ...]  # (network, address)
    route: tuple[str, str] | None  # (destination, gateway): the other network via the censor


MACHINES = {
    "client": Machine("client", ((INSIDE, "198.18.100.10"),), (OUTSIDE_NET, "198.18.100.2")),
    "censor": Machine("censor", ((INSIDE, "198.18.100.2"), (OUTSIDE, "198.18.101.2")), None),
    "servers": Machine("servers", ((OUTSIDE, "198.18.101.10"),), (INSIDE_NET, "198.18.101.2")),
}
# Lab roles on the servers machine, each on an address of its own (added at run time).
SERVER_ROLE_ADDRESSES = {
    "web": "198.18.101.20",
    "bridge": "198.18.101.21",
    "cdn": "198.18.101.22",
    "svc": "198.18.101.23",
}


def machine_of(role: str) -> str:
    """The machine a lab role runs on; LabError for a role the layout lacks."""
    if role in ("client", "censor"):
        return role
    if role in SERVER_ROLE_ADDRESSES:
        return "servers"
    raise LabError(f"the three-machine layout has no {role!r} node (it has client, censor "
                   f"and {', '.join(SERVER_ROLE_ADDRESSES)} on the servers machine)")


class VmLab:
    """What plugins and lab services ask of a lab (``addr``), for the three machines."""

    def addr(self, role: str, v6: bool = False) -> str:
        if v6:
            raise LabError("the three-machine layout is IPv4-only")
        machine_of(role)
        if role in SERVER_ROLE_ADDRESSES:
            return SERVER_ROLE_ADDRESSES[role]
        return MACHINES[role].nets[0][1]

    def addresses(self, role: str) -> list[str]:
        """Every address of a role (for "role:NAME" in censor profiles)."""
        if role == "censor":
            return [a for _, a in MACHINES["censor"].nets]
        return [self.addr(role)]

    @property
    def inside(self) -> str:
        """The censor's address toward the client."""
        return MACHINES["censor"].nets[0][1]

    @property
    def outside(self) -> str:
        return MACHINES["censor"].nets[1][1]
