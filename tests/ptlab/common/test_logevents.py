"""tor's log lines as events."""

from __future__ import annotations

from datetime import datetime

from ptlab.common.logevents import is_tor, tor_event


def test_bootstrap_lines_become_events_with_their_time():
    e = tor_event("tor-client", "Nov 25 09:40:01.250 [notice] Bootstrapped 45% "
                  "(requesting_descriptors): Asking for relay descriptors", year=2026)
    assert e is not None
    assert (e["component"], e["event"], e["percent"], e["tag"]) == (
        "tor-client", "tor_bootstrap", 45, "requesting_descriptors")
    assert e["ts"] == datetime(2026, 11, 25, 9, 40, 1, 250000).timestamp()


def test_warnings_and_errors_are_kept_and_other_notices_are_not():
    warn = tor_event("tor", "Nov  5 01:02:03.000 [warn] Problem bootstrapping. Stuck at 5%",
                     year=2026)
    assert warn and warn["event"] == "tor_warn" and "Stuck at 5%" in warn["message"]
    assert tor_event("tor", "Nov 25 09:40:01.000 [notice] Opening Socks listener") is None
    assert tor_event("tor", '{"ts": 1, "component": "x", "event": "y"}') is None
    assert tor_event("tor", "Feb 31 09:40:01.000 [err] impossible date", year=2026) is None


def test_is_tor():
    assert is_tor(["/usr/bin/tor", "-f", "x"]) and is_tor(["tor"])
    assert not is_tor(["torsocks"]) and not is_tor([])
