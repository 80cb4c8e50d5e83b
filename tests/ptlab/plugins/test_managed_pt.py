"""obfs4 rows in a real lab: ours, obfs4proxy, and each against the other."""

from __future__ import annotations

import shutil

import pytest

from ptlab import plugins

needs_obfs4proxy = pytest.mark.skipif(shutil.which("obfs4proxy") is None,
                                      reason="obfs4proxy is not installed")


@pytest.mark.lab
@needs_obfs4proxy
@pytest.mark.parametrize("client, server", [
    ("ptlab", "ptlab"), ("obfs4proxy", "ptlab"), ("ptlab", "obfs4proxy")])
def test_obfs4_is_reachable_in_every_pairing(lab, client, server):
    lab.spec.transports["obfs4"] = {"client": client, "server": server}
    try:
        row = lab.run_cell("obfs4", "none", bulk_size=2_000_000)
    finally:
        lab.spec.transports.pop("obfs4")
    assert row.status == "reachable", row.error
    assert row.goodput_mbit_s > 10


@pytest.mark.lab
def test_obfs4_under_the_blocklist_is_blocked(lab):
    row = lab.run_cell("obfs4", "ip-blocklist")
    assert row.status == "blocked" and row.detector == "ip_blocklist"


def test_bad_options_are_named():
    p = plugins.get("obfs4")
    with pytest.raises(ValueError, match="iat_mode must be 0, 1 or 2"):
        p.check_options({"iat_mode": 3})
    with pytest.raises(ValueError, match="client: unknown implementation 'obfs4-go'"):
        p.check_options({"client": "obfs4-go"})
    with pytest.raises(ValueError, match="unknown option 'iat'"):
        p.check_options({"iat": 1})
    p.check_options({"first_segment": 40})
    for bad in (-1, 1449, "40", True):
        with pytest.raises(ValueError, match="first_segment must be an integer"):
            p.check_options({"first_segment": bad})
    with pytest.raises(ValueError, match='first_segment needs client = "ptlab"'):
        p.check_options({"first_segment": 40, "client": "obfs4proxy"})


@pytest.mark.lab
@needs_obfs4proxy
@pytest.mark.parametrize("row", ["scramblesuit", "scramblesuit-obfs4proxy"])
def test_scramblesuit_rows_are_reachable_and_blocked_by_the_blocklist(lab, row):
    lab.spec.transports[row] = {}
    try:
        ok = lab.run_cell(row, "none", bulk_size=2_000_000)
        blocked = lab.run_cell(row, "ip-blocklist")
    finally:
        lab.spec.transports.pop(row)
    assert ok.status == "reachable", ok.error
    assert blocked.status == "blocked" and blocked.detector == "ip_blocklist"


def test_scramblesuit_has_no_obfs4proxy_server():
    with pytest.raises(ValueError, match="obfs4proxy has no scramblesuit server"):
        plugins.get("scramblesuit").check_options({"server": "obfs4proxy"})
