"""Real tor in the lab (issue 10): a private network, bootstrapping through our obfs4.

The lab's network (3 authorities, 2 exits on the ``tornet`` node) starts with
the first tor cell. Every row fetches the bulk payload byte-exact (SHA-256)
from the web node over a circuit.
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.lab

BOOT = {"bootstrap_timeout_s": 60.0}
RELAYS_BLOCKED = {"detectors": {"ip_blocklist": {"addresses": ["role:tornet"]}}}


def test_vanilla_tor_bootstraps_and_fetches(lab):
    row = lab.run_cell("tor", "none", **BOOT)
    assert row.status == "reachable", row.error
    assert any(n.startswith("tor: Bootstrapped 100%") for n in row.notes)


@pytest.mark.parametrize("transport", ["obfs4", "meek", "webtunnel"])
def test_tor_over_our_bridge_and_what_the_ext_orport_saw(lab, transport):
    row = lab.run_cell(f"tor+{transport}", "none", **BOOT)
    assert row.status == "reachable", row.error
    assert any(n.startswith("tor: Bootstrapped 100%") for n in row.notes)
    # The bridge's tor learnt the transport and the client's address from our
    # server PT through the Extended ORPort (TRANSPORT, USERADDR), as its debug
    # log says; meek's address comes from the edge's Meek-IP header, and
    # WebTunnel's from nginx's X-Forwarded-For, in whichever family the client used.
    clients = {lab.lab.addr("client"), lab.lab.addr("client", v6=True)}
    seen = [n for n in row.notes if n.startswith("bridge tor (Extended ORPort)")]
    assert seen, row.notes
    m = re.fullmatch(r"bridge tor \(Extended ORPort\): client (\S+), transport (\S+)", seen[0])
    assert m and m.group(1) in clients and m.group(2) == transport


def test_a_relay_blocklist_stops_vanilla_tor_but_not_the_bridge(lab, monkeypatch):
    from ptlab import plugins

    # Unblocked, the client bootstraps in 5-15 s: 20 s without one is a block.
    monkeypatch.setattr(plugins.get("tor"), "bootstrap_floor_s", 20.0)
    row = lab.run_cell("tor", "tor-relay-block", RELAYS_BLOCKED, bootstrap_timeout_s=20.0)
    assert row.status == "blocked"
    assert any("did not reach Bootstrapped 100%" in n for n in row.notes)
    row = lab.run_cell("tor+obfs4", "tor-relay-block", RELAYS_BLOCKED, **BOOT)
    assert row.status == "reachable", row.error


def test_everything_tor_writes_is_in_the_labs_directory(lab, tor_network):
    """The lab's state directory goes with the lab (netns.cleanup, also after a
    crash); the results keep only the processes' logs."""
    base = tor_network.base
    assert base.is_relative_to(lab.lab.state_dir)
    assert all(n.datadir.startswith(str(base)) for n in tor_network.nodes)
    assert (base / "auth0" / "keys" / "authority_certificate").exists()
    assert list(base.glob("cells/*/bridge/keys"))  # the bridges' identities too
    written = {p.name for p in lab.runner.out.rglob("*") if p.is_file()}
    assert not written & {"cached-consensus", "cached-certs", "secret_id_key",
                          "authority_certificate"}
