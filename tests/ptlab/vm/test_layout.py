"""The three-machine layout agrees with the Vagrantfile, and answers what plugins ask."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest

from netns.errors import LabError
from ptlab.vm.layout import (
    INSIDE_NET,
    MACHINES,
    OUTSIDE_NET,
    SERVER_ROLE_ADDRESSES,
    VmLab,
    machine_of,
)

REPO = Path(__file__).resolve().parents[3]


def vagrantfile_machines() -> dict[str, list[str]]:
    text = (REPO / "Vagrantfile").read_text()
    block = text[text.index("MACHINES = {"):text.index("Vagrant.configure")]
    out: dict[str, list[str]] = {}
    for name, body in re.findall(r'"(\w+)"\s*=>\s*\{(.*?)\}', block, re.S):
        out[name] = re.findall(r'"(198\.18\.\d+\.\d+)"', body)
    return out


def test_the_layout_is_the_vagrantfiles():
    vf = vagrantfile_machines()
    assert set(vf) == set(MACHINES) == {"client", "censor", "servers"}
    for name, m in MACHINES.items():
        assert vf[name] == [a for _, a in m.nets], name
    text = (REPO / "Vagrantfile").read_text()
    for m in MACHINES.values():
        if m.route:
            assert f"{m.route[0]} via {m.route[1]}" in text


def test_addresses_stay_in_the_lab_range_and_on_their_networks():
    lab = ipaddress.ip_network("198.18.0.0/15")
    outside = ipaddress.ip_network(OUTSIDE_NET)
    assert ipaddress.ip_network(INSIDE_NET).subnet_of(lab) and outside.subnet_of(lab)
    used = [a for m in MACHINES.values() for _, a in m.nets]
    used += list(SERVER_ROLE_ADDRESSES.values())
    assert len(set(used)) == len(used)
    for a in SERVER_ROLE_ADDRESSES.values():
        assert ipaddress.ip_address(a) in outside


def test_roles_map_to_machines():
    lab = VmLab()
    assert machine_of("client") == "client" and machine_of("censor") == "censor"
    assert {machine_of(r) for r in SERVER_ROLE_ADDRESSES} == {"servers"}
    assert lab.addr("bridge") != lab.addr("web")  # an IP blocklist can tell them apart
    assert lab.addresses("censor") == [lab.inside, lab.outside]
    with pytest.raises(LabError, match="no 'broker' node"):
        machine_of("broker")
    with pytest.raises(LabError, match="IPv4-only"):
        lab.addr("web", v6=True)
