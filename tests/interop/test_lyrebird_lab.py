"""lyrebird (Tor's current PT client, built by ``scripts/setup --peers``) against our
servers in a real lab, byte-exact: its meek_lite through the lab's TLS edge
(domain-fronted) to our meek server, and its WebTunnel client through the bridge's
nginx to our WebTunnel server. The bulk workload checks the SHA-256 of what arrived
both ways (an integrity failure is an ERROR row, never reachable). obfs4 both ways
is in test_obfs4_interop.py; Snowflake in test_snowflake_upstream.py."""

from __future__ import annotations

import json

import pytest

from tests.support import peers
from tests.support.events import components, kept_count

pytestmark = [pytest.mark.lab, pytest.mark.interop, peers.needs("lyrebird")]

MB = 1_000_000


def pt_versions(lab, since: int, component: str = "ptparent-client") -> list[str]:
    """The ``STATUS TYPE=version`` lines a PT reported through its parent (goptlib's
    ReportVersion: implementation and version)."""
    lines = (lab.out_dir / "events.jsonl").read_text().splitlines()[since:]
    return [rec["line"] for rec in map(json.loads, lines)
            if rec["component"] == component and rec["event"] == "pt_line"
            and "TYPE=version" in rec.get("line", "")]


def assert_lyrebird_ran(lab, since: int) -> None:
    pin = peers.pin("lyrebird")
    want = f'IMPLEMENTATION="lyrebird" VERSION="{pin.version}"'
    assert any(want in v for v in pt_versions(lab, since)), pt_versions(lab, since)


def run(lab, transport: str, bulk_size: int = 5 * MB, **options):
    lab.spec.transports[transport] = options
    try:
        return lab.run_cell(transport, "none", bulk_size=bulk_size, bootstrap_timeout_s=20.0,
                            bulk_timeout_s=60.0, idle_timeout_s=10.0)
    finally:
        lab.spec.transports.pop(transport)


def test_lyrebird_meek_lite_moves_bytes_exactly_to_our_meek_server(lab):
    before = kept_count(lab.out_dir)
    row = run(lab, "meek-lite-lyrebird")
    assert row.status == "reachable", row.error
    seen = components(lab.out_dir, since=before)
    assert {"ready", "stats"} <= seen["meek-server"]
    assert_lyrebird_ran(lab, before)
    print(f"lyrebird {peers.version('lyrebird')} meek_lite: {row.goodput_mbit_s:.1f} Mbit/s")


def test_lyrebird_webtunnel_moves_bytes_exactly_through_nginx_to_our_server(lab):
    before = kept_count(lab.out_dir)
    row = run(lab, "webtunnel-lyrebird")
    assert row.status == "reachable", row.error
    seen = components(lab.out_dir, since=before)
    assert "ready" in seen["webtunnel-nginx"] and "ready" in seen["ptparent-server"]
    assert_lyrebird_ran(lab, before)
    print(f"lyrebird {peers.version('lyrebird')} webtunnel: {row.goodput_mbit_s:.1f} Mbit/s")
