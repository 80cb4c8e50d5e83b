"""The conjure-refraction row in a real lab: Refraction Networking's client
(gotapdance v1.7.10, ``scripts/setup --peers``) with the ClientConf our station
writes, registering with our registrar and forwarding through a phantom."""

from __future__ import annotations

import pytest

from tests.support import peers


@pytest.mark.lab
@peers.needs("conjure-client")
def test_refraction_client_row_is_reachable_through_a_phantom(lab):
    lab.spec.transports["conjure-refraction"] = {}
    try:
        row = lab.run_cell("conjure-refraction", "none", None, bulk_size=1_000_000,
                           bootstrap_timeout_s=20.0, bulk_timeout_s=40.0, idle_timeout_s=8.0)
    finally:
        lab.spec.transports.pop("conjure-refraction")
    assert row.status == "reachable", row.error
    cells = sorted((lab.out_dir / "cells").glob("conjure-refraction__none*"),
                   key=lambda d: d.stat().st_mtime)
    station = (cells[-1] / "conjure-station.log").read_text()
    assert '"event":"registration"' in station.replace(" ", "")
    client = (cells[-1] / "conjure-refraction-client.log").read_text()
    assert "Connected to phantom 198.19.200." in client
