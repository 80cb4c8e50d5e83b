"""What a Snowflake proxy reads from and strips out of SDP
(docs/transports/snowflake.md §3.3–§3.4).

* ``client_ip``: the proxy tells the bridge where its client is (for Tor's
  per-country metrics and ExtORPort ``USERADDR``): the first non-local address
  among the offer's ``a=candidate`` lines, failing that the ``c=`` line.
* Local addresses (RFC 1918, CGNAT, link-local, ULA, loopback, unspecified)
  are stripped from the answer's candidates unless the operator keeps them,
  as Tor's ``util.StripLocalAddresses`` does. 198.18.0.0/15, the lab's range,
  is not local, which is why the lab works with default flags.
"""

from __future__ import annotations

import ipaddress

LOCAL_NETS = [ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16",
    "127.0.0.0/8", "0.0.0.0/32", "fc00::/7", "fe80::/10", "::1/128", "::/128")]


def is_local(addr: str) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return True  # mDNS names and garbage are no use to a bridge
    return any(ip in net for net in LOCAL_NETS if net.version == ip.version)


def _candidate_address(line: str) -> str | None:
    # a=candidate:<foundation> <component> <transport> <priority> <address> <port> typ …
    parts = line.split()
    return parts[4] if len(parts) >= 8 and parts[6] == "typ" else None


def client_ip(sdp: str) -> str | None:
    """The client's address as Tor's proxy derives it from an offer, or None."""
    lines = sdp.splitlines()
    for line in lines:
        if line.startswith("a=candidate:"):
            addr = _candidate_address(line)
            if addr and not is_local(addr):
                return str(ipaddress.ip_address(addr))
    for line in lines:
        if line.startswith("c=IN IP"):
            addr = line.split()[-1].split("/")[0]
            if not is_local(addr):
                return str(ipaddress.ip_address(addr))
    return None


def strip_local_candidates(sdp: str) -> str:
    """The SDP without candidate lines on local addresses (line endings kept)."""
    out = []
    for line in sdp.splitlines(keepends=True):
        if line.startswith("a=candidate:"):
            addr = _candidate_address(line.strip())
            if addr is None or is_local(addr):
                continue
        out.append(line)
    return "".join(out)
