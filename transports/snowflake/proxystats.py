"""What the Snowflake volunteer proxy counts: :class:`ProxyStats`, and its metrics text.

Kept apart from the proxy (:mod:`.proxy`) because the counters are filled in
from two places: the proxy's own sessions, and, with ``-workers N``, the
totals its worker processes report (:mod:`.proxyworkers`); the command line
serves them to Prometheus (:mod:`.proxy_cli`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ProxyStats:
    connections: int = 0
    timeouts: int = 0
    inbound_bytes: int = 0  # from the client (data channel) toward the relay
    outbound_bytes: int = 0  # from the relay toward the client
    refused_relays: int = 0
    polls: int = 0
    broker_errors: int = 0  # failed polls (unreachable, HTTP errors, bad replies)
    completed: int = 0  # sessions that relayed and then ended

    def prometheus(self) -> str:
        """Tor's 2.14 proxy metrics, in the Prometheus text format."""
        rows = [("connections_total", "Connections served", self.connections),
                ("connection_timeouts_total", "Data channels that never opened", self.timeouts),
                ("traffic_inbound_bytes_total", "Bytes from clients", self.inbound_bytes),
                ("traffic_outbound_bytes_total", "Bytes to clients", self.outbound_bytes)]
        out = []
        for name, help_, value in rows:
            full = f"tor_snowflake_proxy_{name}"
            out += [f"# HELP {full} {help_}", f"# TYPE {full} counter", f"{full} {value}"]
        return "\n".join(out) + "\n"
