"""A declarative lab topology: nodes, point-to-point links, addresses, routes.

Every link gets its own /24 out of 198.18.0.0/15 and its own /64 out of
2001:db8::/32, so addresses are derived, never configured. Routes are derived
too: a host (one link) gets an aggregate route for the lab ranges through its
only neighbour; a router gets one route per remote subnet along the shortest
path. No node ever gets a default route, so nothing can leave the lab.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass, field

from .errors import LabError
from .names import check_role

LAB_V4 = ipaddress.ip_network("198.18.0.0/15")
LAB_V6 = ipaddress.ip_network("2001:db8::/32")
# Where topology extensions (phantom subnets...) may live: never on a link subnet.
EXT_V4 = ipaddress.IPv4Network("198.19.128.0/17")
EXT_V6 = ipaddress.IPv6Network("2001:db8:8000::/33")
# Link subnets come from the lower half; the upper half (198.19.128.0/17) is
# left for topology extensions such as Conjure's phantom subnet.
MAX_LINKS = 384


@dataclass
class Node:
    """A namespace. A router forwards; a host does not."""

    role: str
    code: str
    router: bool = False
    # Extra prefixes this node owns (topology extensions), e.g. a phantom
    # subnet: addresses are added on lo and routes point here.
    extra_prefixes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_role(self.role)


@dataclass(frozen=True)
class Link:
    """A veth pair between two nodes, numbered to derive its subnets."""

    a: str
    b: str
    index: int

    @property
    def v4_net(self) -> ipaddress.IPv4Network:
        base = int(LAB_V4.network_address) + (self.index << 8)
        return ipaddress.IPv4Network((base, 24))

    @property
    def v6_net(self) -> ipaddress.IPv6Network:
        base = int(LAB_V6.network_address) + (self.index << 64)
        return ipaddress.IPv6Network((base, 64))

    def v4(self, role: str) -> ipaddress.IPv4Address:
        """The IPv4 address of `role` on this link (.1 for a, .2 for b)."""
        return self.v4_net.network_address + (1 if role == self.a else 2)

    def v6(self, role: str) -> ipaddress.IPv6Address:
        return self.v6_net.network_address + (1 if role == self.a else 2)

    def other(self, role: str) -> str:
        return self.b if role == self.a else self.a


@dataclass(frozen=True)
class Route:
    """A route to `dest` through `via` (a neighbour's address on `dev_peer`'s link)."""

    dest: str
    via: str
    peer: str  # role of the next hop


@dataclass
class Topology:
    """Nodes and links. Build one with add_node/add_link, or use default_topology()."""

    nodes: dict[str, Node] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)

    def add_node(self, role: str, code: str, router: bool = False) -> Node:
        if role in self.nodes:
            raise LabError(f"duplicate node {role!r}")
        if any(n.code == code for n in self.nodes.values()):
            raise LabError(f"duplicate node code {code!r}")
        node = Node(role, code, router)
        self.nodes[role] = node
        return node

    def add_link(self, a: str, b: str) -> Link:
        for r in (a, b):
            if r not in self.nodes:
                raise LabError(f"link to unknown node {r!r}")
        if len(self.links) >= MAX_LINKS:
            raise LabError(f"too many links (at most {MAX_LINKS})")
        link = Link(a, b, len(self.links))
        self.links.append(link)
        return link

    def add_prefix(self, role: str, prefix: str) -> None:
        """A topology extension: `role` answers for every address in `prefix`."""
        net = ipaddress.ip_network(prefix)
        inside = (net.subnet_of(EXT_V4) if isinstance(net, ipaddress.IPv4Network)
                  else net.subnet_of(EXT_V6))
        if not inside:
            raise LabError(f"prefix {prefix} is outside the lab's extension ranges "
                           f"{EXT_V4} and {EXT_V6}")
        self.nodes[role].extra_prefixes.append(str(net))

    # --- queries -----------------------------------------------------------

    def links_of(self, role: str) -> list[Link]:
        return [lk for lk in self.links if role in (lk.a, lk.b)]

    def link_between(self, a: str, b: str) -> Link:
        for lk in self.links:
            if {lk.a, lk.b} == {a, b}:
                return lk
        raise LabError(f"no link between {a!r} and {b!r}")

    def addr(self, role: str, v6: bool = False) -> str:
        """A node's primary address: the one on its first link."""
        links = self.links_of(role)
        if not links:
            raise LabError(f"node {role!r} has no link")
        return str(links[0].v6(role) if v6 else links[0].v4(role))

    def addresses(self, role: str) -> list[str]:
        """Every address a node holds, both families."""
        out: list[str] = []
        for lk in self.links_of(role):
            out += [str(lk.v4(role)), str(lk.v6(role))]
        return out

    def role_of_addr(self, address: str) -> str | None:
        ip = ipaddress.ip_address(address)
        for lk in self.links:
            for r in (lk.a, lk.b):
                if ip in (lk.v4(r), lk.v6(r)):
                    return r
        return None

    def _next_hops(self, src: str) -> dict[str, str]:
        """For every node, the neighbour of `src` on a shortest path to it."""
        first: dict[str, str] = {}
        seen = {src}
        queue: deque[tuple[str, str | None]] = deque([(src, None)])
        while queue:
            node, hop = queue.popleft()
            for lk in self.links_of(node):
                nxt = lk.other(node)
                if nxt in seen:
                    continue
                seen.add(nxt)
                h = hop or nxt
                first[nxt] = h
                # Hosts never forward, so paths may only pass through routers.
                if self.nodes[nxt].router:
                    queue.append((nxt, h))
        return first

    def routes(self, role: str) -> list[Route]:
        """The routes `role` needs. Hosts get lab aggregates; routers get specifics."""
        node = self.nodes[role]
        links = self.links_of(role)
        if not node.router:
            if len(links) != 1:
                raise LabError(f"host {role!r} must have exactly one link")
            lk = links[0]
            peer = lk.other(role)
            return [
                Route(str(LAB_V4), str(lk.v4(peer)), peer),
                Route(str(LAB_V6), str(lk.v6(peer)), peer),
            ]
        hops = self._next_hops(role)
        mine = {lk.index for lk in links}
        out: list[Route] = []
        for lk in self.links:
            if lk.index in mine:
                continue
            # Reach the link through whichever end is closer.
            target = lk.a if lk.a in hops else lk.b
            if target not in hops:
                continue
            peer = hops[target]
            via_link = self.link_between(role, peer)
            out.append(Route(str(lk.v4_net), str(via_link.v4(peer)), peer))
            out.append(Route(str(lk.v6_net), str(via_link.v6(peer)), peer))
        for other, n in self.nodes.items():
            if other == role or other not in hops:
                continue
            peer = hops[other]
            via_link = self.link_between(role, peer)
            for p in n.extra_prefixes:
                v6 = ipaddress.ip_network(p).version == 6
                via = via_link.v6(peer) if v6 else via_link.v4(peer)
                out.append(Route(p, str(via), peer))
        return out

    def to_dict(self) -> dict:
        return {
            "nodes": [
                {"role": n.role, "code": n.code, "router": n.router, "prefixes": n.extra_prefixes}
                for n in self.nodes.values()
            ],
            "links": [[lk.a, lk.b] for lk in self.links],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Topology:
        topo = cls()
        for n in d["nodes"]:
            topo.add_node(n["role"], n["code"], n["router"])
            topo.nodes[n["role"]].extra_prefixes = list(n.get("prefixes", []))
        for a, b in d["links"]:
            topo.add_link(a, b)
        return topo


# The prober's source-address pool (a topology extension): the GFW probes from
# thousands of addresses (docs/censors/probing.md §1.3, §2.2), so the lab's prober may too.
PROBER_POOL = ("198.19.250.0/24", "2001:db8:fa00::/64")

# Role -> code for the default topology (docs/architecture.md §1.1).
SERVER_ROLES = {
    "bridge": "b",
    "cdn": "d",
    "broker": "k",
    "isp": "s",
    "web": "w",
    "svc": "v",
}


def default_topology(proxies: int = 2) -> Topology:
    """client - censor - internet, with servers behind the internet core router.

    The prober hangs off the censor, as in the picture: it is the censor's
    own vantage point for active probes, and owns :data:`PROBER_POOL` to
    probe from many source addresses.
    """
    if not 0 <= proxies <= 200:
        raise LabError("proxies must be between 0 and 200")
    t = Topology()
    t.add_node("client", "c")
    t.add_node("censor", "x", router=True)
    t.add_node("inet", "i", router=True)
    t.add_node("prober", "r")
    t.add_link("client", "censor")
    t.add_link("censor", "inet")
    t.add_link("censor", "prober")
    for prefix in PROBER_POOL:
        t.add_prefix("prober", prefix)
    for role, code in SERVER_ROLES.items():
        t.add_node(role, code)
        t.add_link("inet", role)
    for i in range(proxies):
        t.add_node(f"proxy{i}", f"p{i}")
        t.add_link("inet", f"proxy{i}")
    return t
