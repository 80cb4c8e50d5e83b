"""Workloads: what the lab's user does through a transport, measured.

:data:`CATALOGUE` is what ``ptlab list workloads`` prints: the measurements a
cell makes, in the order it makes them, and the spec keys that shape them.
"""

#: name -> (what it measures, the spec keys under [workloads] that set it).
CATALOGUE: dict[str, tuple[str, str]] = {
    "bootstrap": ("seconds until the first request gets through the transport",
                  "bootstrap_timeout_s"),
    "bulk": ("a download of SIZE bytes per repetition, SHA-256 checked; goodput in Mbit/s",
             "bulk.size, bulk.timeout_s, bulk.idle_timeout_s"),
    "latency": ("request round trips through the tunnel, in ms", "latency.count"),
    "benign": ("innocent flows beside the transport (https, http, dns-udp, dns-tcp, ssh, "
               "binary, udp-echo, quic); a blocked one is collateral damage",
               "benign.enabled, benign.timeout_s"),
}
