"""A DNS-tunnel detector: long, high-entropy query names of tunnel record types, in bursts.

Why this exists: DNS tunnels (iodine, dnscat2, dnstt) carry data in the labels of
query names under a domain the tunnel's server is delegated, and bring it back in
the answers, often of TXT or NULL records. No censor's DNS-tunnel rule has been
measured and published, so this is a **model**, not a reproduction
(docs/censors/dnstunnel.md §1). It follows the feature families that published
DNS-tunnel detectors use: name and label length, the character entropy of the
labels, the record type, and the rate of such queries per client and domain.
Every threshold is a parameter; the defaults are ours and documented in
docs/censors/dnstunnel.md §2.

Nothing here raises on malformed input.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

# Record types tunnels favour for their downstream (RFC 1035 §3.2.2; NULL is iodine's
# default, TXT dnscat2's and dnstt's).
TUNNEL_TYPES = frozenset({10, 16})  # NULL, TXT
QTYPE_NAMES = {1: "A", 5: "CNAME", 10: "NULL", 15: "MX", 16: "TXT", 28: "AAAA"}

MAX_NAME = 100  # characters of the whole name (253 at most in DNS)
MIN_PAYLOAD = 30  # characters below the domain before entropy means anything
MIN_ENTROPY = 3.5  # bits per character of the labels below the domain
ZONE_LABELS = 2  # labels of the domain the tunnel runs under (e.g. "t.example")


@dataclass(frozen=True)
class QueryFeatures:
    """What the model reads from one query name."""

    domain: str  # the last ``zone_labels`` labels: whose tunnel this would be
    name_length: int
    payload_length: int  # characters of the labels below ``domain``
    longest_label: int
    entropy: float  # bits per character of those labels
    qtype: int

    def to_json(self) -> dict[str, object]:
        return {"domain": self.domain, "name_length": self.name_length,
                "payload_length": self.payload_length, "longest_label": self.longest_label,
                "entropy": round(self.entropy, 3),
                "qtype": QTYPE_NAMES.get(self.qtype, self.qtype)}


def char_entropy(text: bytes) -> float:
    """Shannon entropy of ``text``'s characters, in bits per character."""
    n = len(text)
    if n == 0:
        return 0.0
    h = -sum(c / n * math.log2(c / n) for c in Counter(text.lower()).values())
    return h if h > 0 else 0.0


def features(labels: tuple[bytes, ...], qtype: int,
             zone_labels: int = ZONE_LABELS) -> QueryFeatures:
    """The features of a question name given as its labels."""
    zone = labels[-zone_labels:] if zone_labels > 0 else ()
    below = labels[: len(labels) - len(zone)]
    payload = b"".join(below)
    return QueryFeatures(
        domain=b".".join(zone).decode("ascii", "replace").lower(),
        name_length=sum(len(x) for x in labels) + max(len(labels) - 1, 0),
        payload_length=len(payload), longest_label=max((len(x) for x in below), default=0),
        entropy=char_entropy(payload), qtype=qtype)


def suspicious(f: QueryFeatures, max_name: int = MAX_NAME, min_payload: int = MIN_PAYLOAD,
               min_entropy: float = MIN_ENTROPY,
               tunnel_types: frozenset[int] = TUNNEL_TYPES) -> str | None:
    """Why one query looks like tunnel traffic, or None.

    ``long-name``: the name is longer than ``max_name``. ``encoded-labels``: at least
    ``min_payload`` characters below the domain with at least ``min_entropy`` bits
    per character; a query of a tunnel record type needs only half that payload.
    """
    if f.name_length > max_name:
        return "long-name"
    need = min_payload // 2 if f.qtype in tunnel_types else min_payload
    if f.payload_length >= need and f.entropy >= min_entropy:
        return "encoded-labels"
    return None
