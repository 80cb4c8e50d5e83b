"""The address a WebTunnel bridge announces, and the bridge line an operator publishes.

Why: a WebTunnel bridge is reached through its ``url=``, so the address in its
bridge line is a placeholder no client dials. Tor's server announces an
address in the documentation prefix 2001:db8::/32 derived from the url, so
each bridge line stays distinct and stable without revealing the bridge's real
address (docs/transports/webtunnel.md §4).
"""

from __future__ import annotations

import hashlib
import ipaddress

from transports.pt.messages import format_addr

VERSION = "0.0.3"  # what Tor's webtunnel puts in ver=
SYNTHETIC_PORT = 443
_PREFIX = ipaddress.IPv6Network("2001:db8::/32")
_SEED_LABEL = "WEBTUNNEL+"


def synthetic_address(url: str) -> ipaddress.IPv6Address:
    """The prefix's 32 bits, then bytes 4-15 of SHA-256("WEBTUNNEL+" + url)."""
    digest = hashlib.sha256((_SEED_LABEL + url).encode("utf-8")).digest()
    prefix_bytes = _PREFIX.prefixlen // 8
    return ipaddress.IPv6Address(_PREFIX.network_address.packed[:prefix_bytes]
                                 + digest[prefix_bytes:16])


def bridge_line(url: str, fingerprint: str) -> str:
    """``webtunnel [2001:db8:…]:443 <FINGERPRINT> url=<url> ver=0.0.3``, as tor would
    publish it from the SMETHOD line."""
    fingerprint = fingerprint.replace(" ", "").upper()
    if len(fingerprint) != 40 or any(c not in "0123456789ABCDEF" for c in fingerprint):
        raise ValueError("a bridge fingerprint is 40 hex digits")
    if not url or any(c.isspace() for c in url):
        raise ValueError("url must be non-empty and without spaces")
    address = format_addr(str(synthetic_address(url)), SYNTHETIC_PORT)
    return f"webtunnel {address} {fingerprint} url={url} ver={VERSION}"
