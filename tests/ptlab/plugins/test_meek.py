"""meek rows in a real lab: our client and Debian obfs4proxy's meek_lite, through the
lab's TLS edge (domain-fronted) to our meek server."""

from __future__ import annotations

import shutil

import pytest

from ptlab import plugins

needs_obfs4proxy = pytest.mark.skipif(shutil.which("obfs4proxy") is None,
                                      reason="obfs4proxy is not installed")


def run(lab, transport: str, censor: str, overrides=None, bootstrap_s: float = 20.0,
        **options):
    lab.spec.transports[transport] = options
    try:
        return lab.run_cell(transport, censor, overrides, bulk_size=2_000_000,
                            bootstrap_timeout_s=bootstrap_s, bulk_timeout_s=60.0,
                            idle_timeout_s=10.0)
    finally:
        lab.spec.transports.pop(transport)


@pytest.mark.lab
@pytest.mark.parametrize("tls", ["python", "chrome"])
def test_our_client_is_reachable_through_the_edge(lab, tls):
    row = run(lab, "meek", "none", tls=tls)
    assert row.status == "reachable", row.error


@pytest.mark.lab
@needs_obfs4proxy
def test_meek_lite_is_reachable_through_the_edge(lab):
    row = run(lab, "meek-lite", "none")
    assert row.status == "reachable", row.error


def test_bad_options_are_named():
    p = plugins.get("meek")
    with pytest.raises(ValueError, match="unknown option 'utls'"):
        p.check_options({"utls": "chrome"})
    with pytest.raises(ValueError, match="client: unknown implementation 'lyrebird'"):
        p.check_options({"client": "lyrebird"})
    with pytest.raises(ValueError, match="only our client chooses its TLS"):
        plugins.get("meek-lite").check_options({"tls": "chrome"})
    p.check_options({"front": "", "tls": "chrome"})
