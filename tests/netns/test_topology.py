"""Addresses and routes derive from the topology, and never leave the lab ranges."""

import ipaddress

import pytest

from netns.errors import LabError
from netns.names import if_name, lab_id_of_ns, ns_name
from netns.topology import LAB_V4, LAB_V6, Topology, default_topology


def test_default_topology_matches_the_picture():
    t = default_topology(proxies=3)
    assert {"client", "censor", "inet", "prober", "bridge", "cdn", "broker", "isp", "web",
            "svc", "proxy0", "proxy2"} <= set(t.nodes)
    # The censor is the only path between the client side and the rest.
    assert [lk.other("client") for lk in t.links_of("client")] == ["censor"]
    assert {lk.other("censor") for lk in t.links_of("censor")} == {"client", "inet", "prober"}


def test_every_route_stays_in_the_lab_ranges():
    t = default_topology(proxies=5)
    t.add_prefix("isp", "198.19.200.0/24")
    for role in t.nodes:
        for r in t.routes(role):
            net = ipaddress.ip_network(r.dest)
            lab = LAB_V4 if net.version == 4 else LAB_V6
            assert net.subnet_of(lab), (role, r)
            assert ipaddress.ip_address(r.via) in lab


def test_client_reaches_servers_only_through_the_censor():
    t = default_topology()
    assert {r.peer for r in t.routes("client")} == {"censor"}
    inet_routes = {r.dest: r.peer for r in t.routes("inet")}
    client_net = str(t.link_between("client", "censor").v4_net)
    assert inet_routes[client_net] == "censor"


def test_prefix_extension_is_routed_to_its_owner():
    t = default_topology()
    t.add_prefix("isp", "198.19.200.0/24")
    assert {r.dest: r.peer for r in t.routes("inet")}["198.19.200.0/24"] == "isp"
    assert {r.dest: r.peer for r in t.routes("censor")}["198.19.200.0/24"] == "inet"
    with pytest.raises(LabError, match="outside the lab's extension ranges"):
        t.add_prefix("isp", "10.0.0.0/8")
    with pytest.raises(LabError, match="outside the lab's extension ranges"):
        t.add_prefix("isp", "198.18.3.0/24")  # a link subnet
    t.add_prefix("isp", "2001:db8:8000:1::/64")


def test_addresses_are_unique():
    t = default_topology(proxies=50)
    addrs = [a for role in t.nodes for a in t.addresses(role)]
    assert len(addrs) == len(set(addrs))
    assert t.role_of_addr(t.addr("web")) == "web"


def test_interface_names_fit_with_hundreds_of_proxies():
    t = default_topology(proxies=200)
    for node in t.nodes.values():
        assert len(if_name("zzzz", node.code)) <= 15
    with pytest.raises(LabError):
        if_name("zzzz", "toolongcode")


def test_names_round_trip():
    assert lab_id_of_ns(ns_name("ab12", "proxy7")) == "ab12"
    assert lab_id_of_ns("other-client") is None
    assert lab_id_of_ns("ptlx") is None


def test_topology_serialises():
    t = default_topology(2)
    t.add_prefix("isp", "198.19.201.0/24")
    u = Topology.from_dict(t.to_dict())
    assert u.to_dict() == t.to_dict()
    assert u.routes("inet") == t.routes("inet")


def test_bad_topologies_are_refused():
    t = Topology()
    t.add_node("a", "a")
    with pytest.raises(LabError, match="duplicate node code"):
        t.add_node("b", "a")
    with pytest.raises(LabError, match="unknown node"):
        t.add_link("a", "zz")
    with pytest.raises(LabError, match="bad role"):
        t.add_node("Bad-Role", "q")
