"""The GFW's fully-encrypted-traffic exemptions (Wu et al., USENIX Security 2023).

Algorithm 1 of the paper, applied to the first client→server TCP payload of a
connection: the connection is exempt (never blocked) if any rule holds.

* Ex1: popcount per byte ≤ 3.4 or ≥ 4.6;
* Ex2: the first six bytes are printable ASCII (0x20–0x7e);
* Ex3: more than 50 % of the bytes are printable;
* Ex4: a run of more than 20 contiguous printable bytes;
* Ex5: a TLS (``[\\x16-\\x17]\\x03[\\x00-\\x09]``) or HTTP (``GET ``, ``PUT ``,
  ``POST ``, ``HEAD ``) prefix.

Thresholds are compared in integers so that 3.4 exactly is exempt. The TLS
third byte follows the paper (≤ 0x09); the authors' ``detect.py`` accepts up
to 0x0f and OpenGFW ≤ 0x09 (censors.md §2.1, §2.4).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

P_BLOCK = 0.263
"""Chance that a non-exempt connection to a targeted server is blocked (§6.3 of the paper)."""

RESIDUAL_CHOICES_S = (120, 180)
"""Residual blocking of the 3-tuple lasts 120 or 180 s (bimodal; GFW Report)."""

_PRINTABLE = bytes(range(0x20, 0x7F))
_NOT_PRINTABLE = bytes(b for b in range(256) if b not in _PRINTABLE)
_RUN = re.compile(rb"[\x20-\x7e]+")
_HTTP = (b"GET ", b"PUT ", b"POST ", b"HEAD ")


def _popcount(data: bytes) -> int:
    return int.from_bytes(data, "big").bit_count()


def _leading_printable(data: bytes) -> int:
    m = _RUN.match(data)
    return m.end() if m else 0


def _printable_count(data: bytes) -> int:
    return len(data) - len(data.translate(None, _PRINTABLE))


def _longest_run(data: bytes) -> int:
    return max((len(m) for m in _RUN.findall(data)), default=0)


def protocol(data: bytes) -> str | None:
    """Ex5's fingerprints: "tls", "http" or None."""
    if len(data) >= 3 and data[0] in (0x16, 0x17) and data[1] == 0x03 and data[2] <= 0x09:
        return "tls"
    if data.startswith(_HTTP):
        return "http"
    return None


def exemption(first_payload: bytes) -> str | None:
    """The first exempting rule ("ex1"…"ex5"), or None: not exempt, subject to blocking."""
    n = len(first_payload)
    if n == 0:
        raise ValueError("the FET rules apply to a data-carrying packet; got no bytes")
    bits10 = _popcount(first_payload) * 10
    if bits10 <= 34 * n or bits10 >= 46 * n:
        return "ex1"
    if _leading_printable(first_payload[:6]) >= 6:
        return "ex2"
    if _printable_count(first_payload) * 2 > n:
        return "ex3"
    if _longest_run(first_payload) > 20:
        return "ex4"
    if protocol(first_payload) is not None:
        return "ex5"
    return None


@dataclass(frozen=True)
class FetFeatures:
    """What the rules look at, for a detection event's evidence."""

    length: int
    popcount_per_byte: float
    leading_printable: int
    printable_fraction: float
    longest_printable_run: int
    protocol: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def features(payload: bytes) -> FetFeatures:
    n = max(len(payload), 1)
    return FetFeatures(len(payload), round(_popcount(payload) / n, 4),
                       _leading_printable(payload), round(_printable_count(payload) / n, 4),
                       _longest_run(payload), protocol(payload))
