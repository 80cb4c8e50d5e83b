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


def cell_dir(lab, transport: str, censor: str):
    dirs = sorted((lab.runner.out / "cells").glob(f"{transport}__{censor}*"),
                  key=lambda p: p.stat().st_mtime)
    return dirs[-1]


def test_vanilla_tor_bootstraps_and_fetches(lab):
    row = lab.run_cell("tor", "none", **BOOT)
    assert row.status == "reachable", row.error
    assert any(n.startswith("tor: Bootstrapped 100%") for n in row.notes)


def test_tor_over_our_obfs4_bridge_and_what_the_ext_orport_saw(lab):
    row = lab.run_cell("tor+obfs4", "none", **BOOT)
    assert row.status == "reachable", row.error
    assert any(n.startswith("tor: Bootstrapped 100%") for n in row.notes)
    debug = (cell_dir(lab, "tor+obfs4", "none") / "tor-bridge" / "debug.log").read_text()
    # The bridge's tor learnt the transport and the client's address from our
    # server PT through the Extended ORPort (TRANSPORT, USERADDR).
    client = lab.lab.addr("client")
    assert re.search(rf"Seen client from '{re.escape(client)}' with transport 'obfs4'", debug)
    assert re.search(rf"Received USERADDR.*to '{re.escape(client)}:\d+'", debug)


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
    base = lab.runner.services.dir / "tor"
    assert all(n.datadir.startswith(str(base)) for n in tor_network.nodes)
    assert (base / "auth0" / "keys" / "authority_certificate").exists()
