"""No packet leaves the lab: no route beyond the lab ranges, and captures agree."""

from __future__ import annotations

import ipaddress
import json

import pytest

from netns.capture import Capture
from netns.topology import LAB_V4, LAB_V6

pytestmark = pytest.mark.lab

# Addresses a namespace may hold routes for besides the lab ranges: its own
# loopback, and IPv6 link-local and multicast (neighbour discovery).
ALLOWED_EXTRA = [ipaddress.ip_network(n) for n in
                 ("127.0.0.0/8", "::1/128", "fe80::/64", "ff00::/8")]


def in_lab(net: ipaddress._BaseNetwork) -> bool:
    lab = LAB_V4 if net.version == 4 else LAB_V6
    return net.subnet_of(lab) or any(
        net.version == a.version and net.subnet_of(a) for a in ALLOWED_EXTRA)


def routes(lab, role: str) -> list[dict]:
    out = []
    for fam in ("-4", "-6"):
        text = lab.exec(role, ["ip", "-j", fam, "route", "show", "table", "all"]).stdout
        out += json.loads(text or "[]")
    return out


def test_no_namespace_has_a_route_out_of_the_lab(lab):
    topo = lab.lab.topology
    for role in topo.nodes:
        rs = routes(lab.lab, role)
        assert rs, role
        for r in rs:
            dst = r["dst"]
            assert dst != "default", (role, r)
            net = ipaddress.ip_network(dst if "/" in dst else
                                       f"{dst}/{32 if ':' not in dst else 128}", strict=False)
            assert in_lab(net), (role, r)


def test_the_lab_adds_nothing_to_the_root_namespace(lab):
    links = lab.lab.exec("client", ["true"])  # the lab is up
    assert links.returncode == 0
    import subprocess

    root = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"ptl{lab.lab.id}" not in root


def test_captured_traffic_stays_in_the_lab_ranges(lab, tmp_path):
    """Capture on both censor interfaces and the core router while a cell runs
    with the benign mix (DNS, HTTPS, SSH, UDP...); every packet is lab-addressed."""
    from scapy.all import IP, IPv6, rdpcap

    l = lab.lab  # noqa: E741
    caps = [Capture(l.ns("censor"), l.iface("censor", p), tmp_path / f"censor-{p}.pcap").start()
            for p in ("client", "inet")]
    caps.append(Capture(l.ns("inet"), l.iface("inet", "web"), tmp_path / "inet-web.pcap").start())
    try:
        row = lab.run_cell("direct", "none", benign=True)
    finally:
        pcaps = [c.stop() for c in caps]
    assert row.status == "reachable" and row.benign_total >= 7
    seen = 0
    for pcap in pcaps:
        for pkt in rdpcap(str(pcap)):
            for layer in (IP, IPv6):
                if layer in pkt:
                    for a in (pkt[layer].src, pkt[layer].dst):
                        net = ipaddress.ip_network(a)
                        assert in_lab(net), (pcap.name, pkt.summary())
                    seen += 1
    assert seen > 100  # the capture really saw the run's traffic


def test_traffic_crossed_the_censor(lab):
    """The censor-side pcap holds the transport flow, and the blocklist counter moved."""
    from scapy.all import IP, TCP, rdpcap

    from ptlab.plugins.direct import BRIDGE_PORT

    row = lab.run_cell("direct", "ip-blocklist")
    assert row.status == "blocked"
    assert row.censor_counters["blocklist_drop"] > 0
    assert len(row.pcaps) == 2
    pcap = lab.runner.out / next(p for p in row.pcaps if p.endswith("censor-client.pcap"))
    client, bridge = lab.lab.addr("client"), lab.lab.addr("bridge")
    syns = [p for p in rdpcap(str(pcap)) if TCP in p and p[IP].src == client
            and p[IP].dst == bridge and p[TCP].dport == BRIDGE_PORT and p[TCP].flags.S]
    assert syns, "no SYN from the client to the bridge seen on the censor's client side"
