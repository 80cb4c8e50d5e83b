"""meek rows in a real lab: our client and Debian obfs4proxy's meek_lite, through the
lab's TLS edge (domain-fronted) to our meek server."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from ptcommon.tlshello import ja3, ja4
from ptlab import plugins
from tests.support.events import components, kept_count
from transports.meek.fingerprint import capture_client_hellos

needs_obfs4proxy = pytest.mark.skipif(shutil.which("obfs4proxy") is None,
                                      reason="obfs4proxy is not installed")


def run(lab, transport: str, censor: str, overrides=None, bootstrap_s: float = 20.0,
        bulk_size: int = 2_000_000, **options):
    lab.spec.transports[transport] = options
    try:
        return lab.run_cell(transport, censor, overrides, bulk_size=bulk_size,
                            bootstrap_timeout_s=bootstrap_s, bulk_timeout_s=60.0,
                            idle_timeout_s=10.0)
    finally:
        lab.spec.transports.pop(transport)


MB20 = 20_000_000


@pytest.mark.lab
@pytest.mark.parametrize("row_name", ["meek", "meek-chrome"])
def test_our_client_moves_20_mb_byte_exact_through_the_edge(lab, row_name):
    """The bulk workload checks the SHA-256 of what arrived (an integrity failure is an
    ERROR row, not reachable)."""
    before = kept_count(lab.out_dir)
    row = run(lab, row_name, "none", bulk_size=MB20)
    assert row.status == "reachable", row.error
    assert row.goodput_mbit_s and row.goodput_mbit_s > 0
    # The server's session counters reach events.jsonl (they once lacked ts/component).
    assert {"ready", "stats"} <= components(lab.out_dir, since=before)["meek-server"]


@pytest.mark.lab
@needs_obfs4proxy
def test_meek_lite_moves_20_mb_byte_exact_through_the_edge(lab):
    row = run(lab, "meek-lite", "none", bulk_size=MB20)
    assert row.status == "reachable", row.error


@pytest.mark.lab
def test_fronting_survives_an_sni_blocklist_of_the_real_name(lab):
    block = {"actions": {"residual": {"seconds": [2]}}}  # the profile lists meek.lab
    fronted = run(lab, "meek", "sni-blocklist", block)
    assert fronted.status == "reachable", fronted.error
    assert "tls" not in fronted.detections
    named = run(lab, "meek", "sni-blocklist", block, bootstrap_s=6.0, front="")
    assert named.status == "blocked", named.error
    assert named.detections.get("tls", 0) >= 1


@pytest.mark.lab
def test_a_ja4_blocklist_of_pythons_hello_stops_python_ssl_but_not_chrome(lab):
    python = asyncio.run(capture_client_hellos("python", 1))[0]
    chrome = asyncio.run(capture_client_hellos("chrome", 1))[0]
    by_ja4 = {"detectors": {"tls": {"ja4": [ja4(python)]}},
              "actions": {"residual": {"seconds": [1]}}}
    blocked = run(lab, "meek", "tls-fingerprint-blocklist", by_ja4, bootstrap_s=6.0)
    assert blocked.status == "blocked" and blocked.detections.get("tls", 0) >= 1
    passed = run(lab, "meek-chrome", "tls-fingerprint-blocklist", by_ja4)
    assert passed.status == "reachable", passed.error
    assert "tls" not in passed.detections
    # JA3 of one Chrome hello: the next connections shuffle their extensions, so they
    # pass; Python's JA3 never changes.
    by_ja3 = {"detectors": {"tls": {"ja3": [ja3(chrome), ja3(python)]}},
              "actions": {"residual": {"seconds": [1]}}}
    shuffled = run(lab, "meek-chrome", "tls-fingerprint-blocklist", by_ja3)
    assert shuffled.status == "reachable", shuffled.error
    stable = run(lab, "meek", "tls-fingerprint-blocklist", by_ja3, bootstrap_s=6.0)
    assert stable.status == "blocked"


@pytest.mark.lab
def test_blocking_the_front_blocks_meek_and_costs_the_benign_sites_behind_it(lab):
    row = lab_run_with_benign(lab)
    assert row.status == "blocked" and row.detections.get("tls", 0) >= 1
    https = row.benign_detail.get("https", {})
    assert https.get("blocked", 0) >= 1, row.benign_detail  # collateral on the same edge
    assert row.collateral and row.collateral > 0
    # Another front on the same edge is not on the list: meek moves there.
    other = run(lab, "meek", "front-domain-block", {"actions": {"residual": {"seconds": [1]}}},
                front="assets.lab")
    assert other.status == "reachable", other.error


def lab_run_with_benign(lab):
    lab.spec.transports["meek"] = {}
    try:
        return lab.run_cell("meek", "front-domain-block", bulk_size=500_000,
                            bootstrap_timeout_s=6.0, benign=True)
    finally:
        lab.spec.transports.pop("meek")


def test_bad_options_are_named():
    p = plugins.get("meek")
    with pytest.raises(ValueError, match="unknown option 'utls'"):
        p.check_options({"utls": "chrome"})
    with pytest.raises(ValueError, match="client: unknown implementation 'meek-client'"):
        p.check_options({"client": "meek-client"})
    with pytest.raises(ValueError, match="only our client chooses its TLS"):
        plugins.get("meek-lite").check_options({"tls": "chrome"})
    p.check_options({"front": "", "tls": "chrome"})
