"""Verdicts: data beats everything, one shared FIN time is obfs4proxy-like,
all-TIMEOUT is ideal probe resistance, anything else is mixed."""

import json

import pytest

from censor_sim.prober.observe import ProbeResult
from censor_sim.prober.verdict import fin_threshold, looks_like, summarize


def res(probe: str, close: str, after: float | None = None, data: bytes = b"",
        connected: bool = True) -> ProbeResult:
    return ProbeResult(probe=probe, connected=connected, response=data,
                       response_len=len(data), close=close, close_after_s=after)


def test_any_data_means_ordinary_server():
    rs = [res("http", "FIN", 0.01, b"HTTP/1.1 400"), res("empty", "TIMEOUT")]
    assert looks_like(rs) == "responds-with-data"
    assert summarize(rs)["data_probes"] == ["http"]


def test_same_fin_time_is_obfs4proxy_like():
    rs = [res(n, "FIN", 58.0 + i * 0.01) for i, n in enumerate(("tls", "empty", "rand-17k"))]
    assert looks_like(rs) == "closes-at-threshold"
    assert fin_threshold(rs) == 58.01
    s = summarize(rs)
    assert s["verdict"] == "closes-at-threshold" and s["fin_threshold_s"] == 58.01
    assert s["close_counts"] == {"FIN": 3} and s["distinct_close_s"] == [58.0]
    json.dumps(s)


def test_spread_fin_times_or_an_rst_are_mixed():
    spread = [res("tls", "FIN", 30.0), res("empty", "FIN", 31.0)]
    assert fin_threshold(spread) is None and looks_like(spread) == "mixed"
    assert looks_like(spread, tolerance_s=2.0) == "closes-at-threshold"
    # Pre-0.0.11 obfs4: rand-17k gets an immediate RST, the rest a FIN at 30-90 s.
    old_obfs4 = [res("tls", "FIN", 61.0), res("rand-17k", "RST", 0.01)]
    assert looks_like(old_obfs4) == "mixed"


def test_all_timeouts_is_silent():
    rs = [res(n, "TIMEOUT") for n in ("tls", "empty", "rand-51")]
    assert looks_like(rs) == "silent-timeout"
    assert summarize(rs)["close_counts"] == {"TIMEOUT": 3}


def test_unreachable_and_partial():
    refused = [res("tls", "REFUSED", connected=False), res("empty", "REFUSED", connected=False)]
    assert looks_like(refused) == "unreachable"
    assert looks_like([res("tls", "TIMEOUT"), refused[0]]) == "mixed"
    with pytest.raises(ValueError):
        looks_like([])
