"""The Conjure row in a real lab: register through the edge, connect to a phantom in the
ISP's unused space, reach the covert destination through our station."""

from __future__ import annotations

import pytest

from ptlab import plugins


def run(lab, censor: str = "none", overrides=None, bootstrap_s: float = 20.0,
        bulk_size: int = 2_000_000, **options):
    lab.spec.transports["conjure"] = {"reg_delay": 0.2, **options}
    try:
        return lab.run_cell("conjure", censor, overrides, bulk_size=bulk_size,
                            bootstrap_timeout_s=bootstrap_s, bulk_timeout_s=60.0,
                            idle_timeout_s=10.0)
    finally:
        lab.spec.transports.pop("conjure")


@pytest.mark.lab
def test_min_moves_20_mb_byte_exact_through_a_phantom(lab):
    row = run(lab, bulk_size=20_000_000)
    assert row.status == "reachable", row.error
    log = (lab.out_dir / "cells" / "conjure__none" / "conjure-station.log").read_text()
    assert '"event": "registration"' in log and '"transport": "min"' in log


def test_bad_options_are_named():
    p = plugins.get("conjure")
    with pytest.raises(ValueError, match="unknown option 'phantom'"):
        p.check_options({"phantom": "x"})
    with pytest.raises(ValueError, match="transport must be min"):
        p.check_options({"transport": "dtls"})
    with pytest.raises(ValueError, match="reg_delay"):
        p.check_options({"reg_delay": -1})
