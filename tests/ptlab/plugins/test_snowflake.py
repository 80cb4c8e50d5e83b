"""Snowflake rows in a real lab: ours end to end, Debian's pion proxy and client in their
slots, rendezvous direct and domain-fronted through the edge, and which DTLS stack
ru-snowflake-dtls-2022 catches."""

from __future__ import annotations

import re
import shutil

import pytest

from ptlab import plugins
from tests.support.events import components, kept_count

needs_debian = pytest.mark.skipif(
    not (shutil.which("snowflake-proxy") and shutil.which("snowflake-client")),
    reason="Debian's snowflake-proxy/-client are not installed")


def run(lab, transport: str, censor: str, overrides=None, bootstrap_s: float = 30.0,
        **options):
    # Two proxies: Debian's 2.5.1 proxy polls only every 5 s and runs one
    # negotiation at a time, and each workload connection is a new rendezvous.
    lab.spec.transports[transport] = {"proxies": 2, **options}
    try:
        return lab.run_cell(transport, censor, overrides, bulk_size=1_000_000,
                            bootstrap_timeout_s=bootstrap_s, bulk_timeout_s=40.0,
                            idle_timeout_s=15.0)
    finally:
        lab.spec.transports.pop(transport)


@pytest.mark.lab
def test_fronting_hides_the_broker_name_from_an_sni_blocklist(lab):
    """With snowflake.lab (the broker's name on the edge) on the SNI blocklist, a
    client that names it in TLS is cut off; a domain-fronted client, whose SNI
    says front.lab and whose Host header says snowflake.lab, gets through."""
    sni_block = {"detectors": {"tls": {"sni": ["snowflake.lab"]}},
                 "actions": {"residual": {"seconds": [2]}}}
    before = kept_count(lab.out_dir)
    fronted = run(lab, "snowflake", "sni-blocklist", overrides=sni_block, rendezvous="fronted")
    assert fronted.status == "reachable", fronted.error
    # The bridge's and the broker's counters reach events.jsonl (they once lacked
    # ts/component and were dropped), as do the censor's.
    seen = components(lab.out_dir, since=before)
    assert {"ready", "stats"} <= seen["snowflake-bridge"]
    assert {"ready", "stats"} <= seen["broker"]
    assert "ready" in seen["censor"]
    # Our proxies asked the lab's NAT probe service, which reached them.
    cell = lab.out_dir / "cells" / "snowflake__sni-blocklist"
    assert "NAT type: unrestricted" in (cell / "snowflake-proxy0.log").read_text()
    assert "tls" not in fronted.detections
    named = run(lab, "snowflake", "sni-blocklist", overrides=sni_block, bootstrap_s=12.0,
                rendezvous="edge")
    assert named.status == "blocked", named.error
    assert named.detections.get("tls", 0) >= 1


@pytest.mark.lab
@needs_debian
def test_ru_2022_rules_catch_pion_but_not_aiortc(lab):
    """The proxy answers the offer, so its DTLS stack writes the ClientHello the 2022
    rule matches: Debian's proxy (pion) is dropped, ours (aiortc) passes."""
    ours = run(lab, "snowflake", "ru-snowflake-dtls-2022")
    assert ours.status == "reachable", ours.error
    assert "dtls" not in ours.detections
    pion = run(lab, "snowflake-debian-proxy", "ru-snowflake-dtls-2022", bootstrap_s=12.0)
    assert pion.status == "blocked", pion.error
    assert pion.detections.get("dtls", 0) >= 1


@pytest.mark.lab
@needs_debian
def test_debian_client_rendezvouses_through_our_broker_and_proxy(lab):
    row = run(lab, "snowflake-debian-client", "none")
    assert row.status == "reachable", row.error


def test_bad_options_are_named():
    p = plugins.get("snowflake")
    with pytest.raises(ValueError, match="unknown option 'peers'"):
        p.check_options({"peers": 2})
    with pytest.raises(ValueError, match="proxy: unknown implementation 'tor'"):
        p.check_options({"proxy": "tor"})
    with pytest.raises(ValueError, match="proxies must be an integer from 1 to 8"):
        p.check_options({"proxies": 0})
    with pytest.raises(ValueError, match="max_peers must be an integer from 1 to proxies"):
        p.check_options({"proxies": 2, "max_peers": 3})
    with pytest.raises(ValueError, match="rendezvous must be one of direct, edge, fronted"):
        p.check_options({"rendezvous": "amp"})
    p.check_options({"proxies": 3, "max_peers": 2, "rendezvous": "edge", "client": "ptlab"})


@pytest.mark.lab
def test_a_proxy_pool_runs_two_proxies_in_one_process_from_their_own_nodes(lab):
    """proxy_pool = 2: one process, two threads, each in its proxy node's namespace,
    polling from that node's address; the row works as with two processes."""
    row = run(lab, "snowflake", "none", proxy_pool=2, max_peers=2)
    assert row.status == "reachable", row.error
    cell = lab.out_dir / "cells" / "snowflake__none"
    logs = sorted(cell.glob("snowflake-prox*.log"))
    assert [p.name for p in logs] == ["snowflake-proxies0.log"]  # one process
    text = logs[0].read_text()
    starts = re.findall(r"\[(ptl\w+-proxy\d)\] proxy starting \(broker \S+, from (\S+)\)", text)
    assert sorted(starts) == sorted((lab.runner.lab.ns(f"proxy{i}"),
                                     lab.runner.lab.addr(f"proxy{i}")) for i in range(2))
    assert text.count("NAT type: unrestricted") == 2
    assert re.search(r'"event": ?"ready", ?"proxies": ?2', text)


def test_proxy_pool_options_are_checked():
    p = plugins.get("snowflake")
    with pytest.raises(ValueError, match="proxy_pool must be an integer >= 1"):
        p.check_options({"proxy_pool": 0})
    with pytest.raises(ValueError, match='proxy_pool needs proxy = "ptlab"'):
        p.check_options({"proxy_pool": 2, "proxy": "debian"})
