"""The proxy's counters, in the Prometheus text Tor's proxy serves."""

from __future__ import annotations

from transports.snowflake.proxystats import ProxyStats


def test_prometheus_names_follow_tor():
    text = ProxyStats(connections=2, inbound_bytes=10).prometheus()
    assert "tor_snowflake_proxy_connections_total 2" in text
    assert "tor_snowflake_proxy_traffic_inbound_bytes_total 10" in text
    assert "# TYPE tor_snowflake_proxy_connection_timeouts_total counter" in text
