"""WebTunnel rows in a real lab: our client, Debian's nginx in the bridge namespace with
the bridge's own certificate, our server behind the secret path (issue 25)."""

from __future__ import annotations

import pytest

from tests.support.events import components, kept_count

pytestmark = pytest.mark.lab

MB20 = 20_000_000
BLOCK_BRIDGE_NAME = {"detectors": {"tls": {"sni": ["bridge.lab"]}},
                     "actions": {"residual": {"seconds": [2]}}}


def run(lab, transport: str, censor: str, overrides=None, bootstrap_s: float = 20.0,
        bulk_size: int = 2_000_000):
    return lab.run_cell(transport, censor, overrides, bulk_size=bulk_size,
                        bootstrap_timeout_s=bootstrap_s, bulk_timeout_s=90.0,
                        idle_timeout_s=10.0)


def test_webtunnel_moves_20_mb_byte_exact_through_nginx(lab):
    """The bulk workload checks the SHA-256 of what arrived; nginx and our server (under
    the PT parent) both ran."""
    before = kept_count(lab.out_dir)
    row = run(lab, "webtunnel", "none", bulk_size=MB20)
    assert row.status == "reachable", row.error
    assert row.goodput_mbit_s and row.goodput_mbit_s > 0
    seen = components(lab.out_dir, since=before)
    assert "ready" in seen["webtunnel-nginx"] and "ready" in seen["ptparent-server"]


def test_an_sni_blocklist_of_the_bridge_name_blocks_it_and_imitation_changes_that(lab):
    named = run(lab, "webtunnel", "sni-blocklist", BLOCK_BRIDGE_NAME, bootstrap_s=6.0)
    assert named.status == "blocked", named.error
    assert named.detections.get("tls", 0) >= 1
    imitated = run(lab, "webtunnel-imitation", "sni-blocklist", BLOCK_BRIDGE_NAME)
    assert imitated.status == "reachable", imitated.error
    assert "tls" not in imitated.detections
    # ...and a blocklist of the imitated name blocks the imitating client instead.
    other = {"detectors": {"tls": {"sni": ["www.benign.lab"]}},
             "actions": {"residual": {"seconds": [2]}}}
    caught = run(lab, "webtunnel-imitation", "sni-blocklist", other, bootstrap_s=6.0)
    assert caught.status == "blocked", caught.error


def test_the_fet_rule_exempts_it(lab):
    """A TLS record header is one of Wu et al.'s protocol exemptions (Ex5)."""
    row = run(lab, "webtunnel", "gfw-fet-2021")
    assert row.status == "reachable", row.error
    assert "fet" not in row.detections


def test_the_https_prober_finds_a_web_server_and_leaves_it_alone(lab):
    row = run(lab, "webtunnel", "https-front-prober")
    assert row.status == "reachable", row.error
    assert row.probes_sent >= 1, "the prober never probed the bridge"
    assert row.probe_verdicts == {"https-web-server": row.probes_sent}

