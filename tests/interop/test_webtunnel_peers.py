"""WebTunnel against Tor's own implementations (built by ``scripts/setup --peers``),
through the lab's nginx on the bridge, byte-exact (the bulk workload checks the
SHA-256 both ways; an integrity failure is an ERROR row, never reachable):

- our client to Tor's WebTunnel server (``webtunnel-tor-server``);
- lyrebird's client to Tor's server, the all-real pair, which checks that the
  lab's nginx is set up as Tor's bridges are (docs/lab/peers.md §3.2);
- tor over WebTunnel, bootstrapping through a bridge whose tor runs Tor's
  server (``tor+webtunnel-tor-server``).

lyrebird's client to our server is in test_lyrebird_lab.py."""

from __future__ import annotations

import json

import pytest

from tests.support import peers
from tests.support.events import components, kept_count

pytestmark = [pytest.mark.lab, pytest.mark.interop, peers.needs("webtunnel-server")]

MB = 1_000_000


def run(lab, transport: str, bulk_size: int = 5 * MB, bootstrap_s: float = 20.0, **options):
    lab.spec.transports[transport] = options
    try:
        return lab.run_cell(transport, "none", bulk_size=bulk_size,
                            bootstrap_timeout_s=bootstrap_s, bulk_timeout_s=60.0,
                            idle_timeout_s=10.0)
    finally:
        lab.spec.transports.pop(transport)


def reported_versions(lab, since: int, component: str) -> list[str]:
    lines = (lab.out_dir / "events.jsonl").read_text().splitlines()[since:]
    return [rec["line"] for rec in map(json.loads, lines)
            if rec["component"] == component and rec["event"] == "pt_line"
            and "TYPE=version" in rec.get("line", "")]


def assert_ran(lab, since: int, component: str, implementation: str, version: str) -> None:
    want = f'IMPLEMENTATION="{implementation}" VERSION="{version}"'
    seen = reported_versions(lab, since, component)
    assert any(want in line for line in seen), seen


def tor_server_version() -> str:
    return peers.pin("webtunnel-server").version.removeprefix("v")


def test_our_client_moves_bytes_exactly_through_nginx_to_tors_server(lab):
    before = kept_count(lab.out_dir)
    row = run(lab, "webtunnel-tor-server")
    assert row.status == "reachable", row.error
    assert "ready" in components(lab.out_dir, since=before)["webtunnel-nginx"]
    # webtunnel's server reports the version its own source declares (webtunnel.Version).
    assert_ran(lab, before, "ptparent-server", "webtunnel", tor_server_version())
    print(f"ours -> {peers.version('webtunnel-server')}: {row.goodput_mbit_s:.1f} Mbit/s")


@peers.needs("lyrebird")
def test_lyrebirds_client_reaches_tors_server_through_the_labs_nginx(lab):
    before = kept_count(lab.out_dir)
    row = run(lab, "webtunnel-tor-server", client="lyrebird")
    assert row.status == "reachable", row.error
    assert_ran(lab, before, "ptparent-server", "webtunnel", tor_server_version())
    assert_ran(lab, before, "ptparent-client", "lyrebird", peers.pin("lyrebird").version)


def test_tor_bootstraps_over_webtunnel_through_tors_server(lab):
    """About 25 s, most of it the private Tor network's first consensus (shared with
    the session's other tor rows)."""
    row = run(lab, "tor+webtunnel-tor-server", bulk_size=MB, bootstrap_s=60.0)
    assert row.status == "reachable", row.error
    assert any("Bootstrapped 100%" in note for note in row.notes), row.notes
    assert any("transport webtunnel" in note for note in row.notes), row.notes
