"""Measured fingerprints of RST injectors, and forging RSTs that carry them.

Each censor's forged RSTs differ in ways a client (or a researcher's pcap)
can tell apart: how many, which flags, the IP header's DF bit, TTL and IP
ID, any payload, and whom they are sent to. A profile's ``[actions.rst]``
names one or more of these with ``fingerprints = [...]``; explicit keys
(``count``, ``flags``, ``ttl``, ``ip_id``, ``df``, ``window``, ``payload``,
``to``) override the preset's.

The values are what the papers observed at the client. In the lab the
censor is one link from the client and forges from its own namespace's
output path (no router decrements it), so the TTL it sends is the TTL the
client sees. A range means "drawn per injection from the profile's seeded
RNG"; copies of one injection are identical unless ``window`` lists one
value per copy.

Sources:

* ``gfw-i``, ``gfw-ii``, ``gfw-iii``, ``henan``: M. Wu, A. Zohaib, Z. Durumeric,
  A. Houmansadr and E. Wustrow, "A Wall Behind A Wall: Emerging Regional
  Censorship in China", IEEE S&P 2025, Table IV and §4.4 (all triggered by
  TLS SNI; GFW types target both sides and leave a 180 s residual; Henan
  targets the client only and leaves none). docs/censors/blocking.md §5.
* ``gfw-443-syn``, ``gfw-443-synack``: GFW Report, "Analysis of the GFW's
  Unconditional Port 443 Block on August 20, 2025", §2.1 (three RST+ACKs,
  relative seq 0 and windows 1980–1982 on the SYN; relative seq 1 and
  windows 3293–3295 on the SYN+ACK). docs/censors/blocking.md §6.
"""

from __future__ import annotations

import random
from typing import Any

from .actions import InjectTcp

HENAN_PAYLOAD = bytes([1, 2, 3, 4, 5, 6, 7, 8, 9, 0])

FINGERPRINTS: dict[str, dict[str, Any]] = {
    # One RST (no ACK), DF clear, TTL 55–118, IP ID 0.
    "gfw-i": {"count": 1, "flags": "R", "df": False, "ttl": [55, 118], "ip_id": 0,
              "to": "both"},
    # Three identical RST+ACKs, DF set, TTL 39–238, IP ID random (0x00A3–0xFE5F seen).
    "gfw-ii": {"count": 3, "flags": "RA", "df": True, "ttl": [39, 238],
               "ip_id": [0x00A3, 0xFE5F], "to": "both"},
    # One RST+ACK, DF clear, TTL 248, IP ID 0x9916–0x9933.
    "gfw-iii": {"count": 1, "flags": "RA", "df": False, "ttl": 248,
                "ip_id": [0x9916, 0x9933], "to": "both"},
    # One RST+ACK carrying 01 02 … 09 00, DF clear, TTL 58, IP ID 1, client only.
    "henan": {"count": 1, "flags": "RA", "df": False, "ttl": 58, "ip_id": 1,
              "payload": HENAN_PAYLOAD.hex(), "to": "client"},
    # 2025-08-20: three RST+ACKs whose windows count up, to the connection's initiator.
    "gfw-443-syn": {"count": 3, "flags": "RA", "window": [1980, 1981, 1982], "to": "client"},
    "gfw-443-synack": {"count": 3, "flags": "RA", "window": [3293, 3294, 3295],
                       "to": "client"},
}
KEYS = {"count", "flags", "df", "ttl", "ip_id", "window", "payload", "to"}


def presets(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The RST shapes an ``[actions.rst]`` table asks for: one per named
    fingerprint (or one from the table alone), the table's keys overriding."""
    names = cfg.get("fingerprints", [])
    if isinstance(names, str):
        names = [names]
    own = {k: cfg[k] for k in KEYS if k in cfg}
    out = []
    for n in names:
        if n not in FINGERPRINTS:
            raise ValueError(f"actions.rst.fingerprints: unknown {n!r} "
                             f"(known: {', '.join(sorted(FINGERPRINTS))})")
        out.append({**FINGERPRINTS[n], **own, "fingerprint": n})
    return out or [{"count": 3, "flags": "R", "to": "both", **own}]


def _draw(value: Any, rng: random.Random) -> int | None:
    if value is None or isinstance(value, int):
        return value
    if value == "random":
        return rng.randrange(1 << 16)
    lo, hi = value
    return rng.randint(int(lo), int(hi))


def forge(shape: dict[str, Any], template: InjectTcp, rng: random.Random) -> list[InjectTcp]:
    """The packets of one injection of `shape`, addressed and numbered as `template`.

    TTL and IP ID are drawn once per injection; a list of windows gives each
    copy its own (one packet each), otherwise the copies go as one record
    sent ``count`` times.
    """
    count = int(shape.get("count", 1))
    ttl = _draw(shape.get("ttl", 64), rng)
    fields = {"flags": shape.get("flags", "R"), "ttl": 64 if ttl is None else ttl,
              "ip_id": _draw(shape.get("ip_id"), rng), "df": bool(shape.get("df", False)),
              "payload": bytes.fromhex(shape.get("payload", "")), "count": count}
    window = shape.get("window", template.window)
    base = {**template.__dict__, **fields}
    if isinstance(window, list):
        if len(window) != count:
            raise ValueError("actions.rst.window: one window per copy (count)")
        return [InjectTcp(**{**base, "window": int(w), "count": 1}) for w in window]
    return [InjectTcp(**{**base, "window": int(window)})]
