"""The GFW's fully-encrypted-traffic (FET) exemptions: Wu et al., USENIX Security 2023.

From November 2021 to March 2023 the Great Firewall blocked connections whose
first client→server data packet "looked random". Algorithm 1 of the paper
(restated in docs/censors/fet.md §2) says when a connection is *exempt*, i.e. never
blocked; a connection is exempt if any of these hold for the first data packet
``pkt``:

* Ex1: ``popcount(pkt) / len(pkt) <= 3.4`` or ``>= 4.6`` (average set bits per byte);
* Ex2: the first six bytes are printable ASCII, ``[0x20, 0x7e]``;
* Ex3: more than 50 % of the bytes are printable;
* Ex4: a run of more than 20 contiguous printable bytes;
* Ex5: a TLS (``[\\x16-\\x17]\\x03[\\x00-\\x09]``) or HTTP (``GET ``, ``PUT ``,
  ``POST ``, ``HEAD ``) prefix.

A connection that no rule exempts is blocked with probability :data:`P_BLOCK`,
after which its 3-tuple stays blocked for one of :data:`RESIDUAL_CHOICES_S`.
This module only classifies bytes; the engine draws the probability and keeps
the residual state.

Deliberate choices where the published implementations disagree (docs/censors/fet.md §6):

* The TLS third byte follows the paper, ``<= 0x09``. The authors' own
  ``artifacts/utils/detect.py`` accepts ``range(0x00, 0x10)`` (up to 0x0f)
  although its comment says ``[\\x00-\\x09]``; OpenGFW (``analyzer/tcp/fet.go``)
  uses ``<= 0x09``.
* HTTP prefixes are the paper's four, *with* the trailing space. OpenGFW
  instead exempts any of nine three-letter verb prefixes (``GET``, ``HEA``,
  ``POS``, ``PUT``, ``DEL``, ``CON``, ``OPT``, ``TRA``, ``PAT``), no space needed.
* Thresholds are compared in integers (``10 * popcount`` against ``34 * len``,
  ``2 * printable`` against ``len``), so a ratio of exactly 3.4, 4.6 or 50 %
  lands on the side the paper's ``<=``, ``>=`` and "more than" put it, whatever
  the payload length.

Speed: the censor classifies every new flow's first payload, so each rule is
one C-level pass (``int.bit_count`` for Ex1, one ``bytes.translate`` to a 0/1
printable mask shared by Ex2–Ex4, ``bytes.startswith`` for Ex5). A 1000-byte
payload takes a few microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

P_BLOCK = 0.263
"""Probability that a non-exempt connection to a targeted server is blocked.

Wu et al. 2023 §6.3: the number of connections up to the first block fits a
geometric distribution with p ≈ 26.3 % (estimated over 109,489 blocked IPs);
the paper's phrasing is that the GFW "only monitors 26 % of connections".
Restated in OONI probe-cli PR #1026. docs/censors/fet.md §3.1.
"""

RESIDUAL_CHOICES_S = (120, 180)
"""Residual blocking: after a block, client→server TCP packets of the same
(client IP, server IP, server port) are dropped for 120 *or* 180 seconds
(bimodal, not a flat 180 s). Wu et al. 2023 and the GFW Report write-up on
residual censorship; docs/censors/fet.md §3.2.
"""

TLS_THIRD_BYTE_MAX = 0x09
"""Highest TLS minor-version byte Ex5 accepts: the paper's ``[\\x00-\\x09]``.

The authors' ``detect.py`` uses 0x0f here; see the module docstring.
"""

HTTP_PREFIXES = (b"GET ", b"PUT ", b"POST ", b"HEAD ")
"""Ex5's HTTP fingerprints, exactly as the paper lists them (trailing space included)."""

Rule = Literal["ex1", "ex2", "ex3", "ex4", "ex5"]
Protocol = Literal["tls", "http"]

# Every byte maps to 1 if printable ASCII [0x20, 0x7e] and 0 otherwise. One
# translate yields a mask whose set-bit count is the printable count (Ex3),
# whose prefix tells Ex2, and in which Ex4 is a substring search.
_PRINTABLE_MASK = bytes(1 if 0x20 <= b <= 0x7E else 0 for b in range(256))
_SIX_PRINTABLE = b"\x01" * 6
_RUN_OVER_20 = b"\x01" * 21


def _popcount(data: bytes) -> int:
    """Total set bits: one C-level pass instead of a Python loop over bytes."""
    return int.from_bytes(data, "little").bit_count()


def _longest_run(mask: bytes) -> int:
    """Length of the longest run of 1s in a printable mask.

    Galloping then bisecting on "is there a run of k?" keeps this to about
    2·log2(longest run) substring searches, each a fast C scan; runs in random
    data are short, so this is usually 4–6 searches.
    """
    if 1 not in mask:
        return 0
    lo, hi = 1, 2  # invariant: a run of lo exists; test hi
    while hi <= len(mask) and b"\x01" * hi in mask:
        lo, hi = hi, hi * 2
    hi = min(hi, len(mask) + 1)  # now: no run of hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b"\x01" * mid in mask:
            lo = mid
        else:
            hi = mid
    return lo


def protocol(payload: bytes) -> Protocol | None:
    """Ex5's fingerprints: ``"tls"``, ``"http"`` or None.

    TLS is ``[\\x16-\\x17]\\x03[\\x00-\\x09]``: handshake or application-data
    record, major version 3, minor up to :data:`TLS_THIRD_BYTE_MAX` (§4.3 of the
    paper). HTTP is one of :data:`HTTP_PREFIXES`, case-sensitive.
    """
    if (len(payload) >= 3 and payload[0] in (0x16, 0x17) and payload[1] == 0x03
            and payload[2] <= TLS_THIRD_BYTE_MAX):
        return "tls"
    if payload.startswith(HTTP_PREFIXES):
        return "http"
    return None


def exemption(first_payload: bytes) -> Rule | None:
    """The first rule, in order Ex1…Ex5, that exempts this first payload; None if none does.

    None means the connection is subject to (probabilistic) blocking. The rules
    are defined for a data-carrying packet, so an empty payload is a caller
    error (the engine only calls this with the first non-empty client→server
    payload): ValueError.
    """
    return judge(first_payload)[0]


def judge(first_payload: bytes) -> tuple[Rule | None, FetFeatures | None]:
    """:func:`exemption`, and for a payload no rule exempts its :func:`features` too,
    from the same passes over the bytes: the censor logs the features of every
    connection it finds subject to blocking, so computing them apart doubled
    the work on exactly the flows it looks at longest."""
    rule, values = _judged(first_payload)
    return rule, None if values is None else FetFeatures(*values)


def not_exempt_evidence(first_payload: bytes) -> dict[str, Any] | None:
    """None when a rule exempts this first payload; otherwise what the censor logs
    of it: ``rule: "not-exempt"`` and :class:`FetFeatures`' fields, by name.

    :func:`judge`'s answer as the censor's detection event holds it, built straight
    from the measurements: the censor asks this of every connection it sees, and
    a frozen dataclass made to be taken apart again was a fifth of its cost."""
    values = _judged(first_payload)[1]
    return None if values is None else dict(zip(_EVIDENCE_KEYS, ("not-exempt", *values),
                                                 strict=True))


def _judged(first_payload: bytes) -> tuple[Rule | None, tuple | None]:
    """The rule that exempts the payload, or None and its features' values (in
    :class:`FetFeatures`' field order)."""
    n = len(first_payload)
    if n == 0:
        raise ValueError("the FET rules apply to a data-carrying packet; got no bytes")
    bits = _popcount(first_payload)
    if 10 * bits <= 34 * n or 10 * bits >= 46 * n:  # Ex1: <= 3.4 or >= 4.6 bits per byte
        return "ex1", None
    mask = first_payload.translate(_PRINTABLE_MASK)
    if mask.startswith(_SIX_PRINTABLE):  # Ex2: shorter than 6 bytes cannot match
        return "ex2", None
    printable = _popcount(mask)
    if 2 * printable > n:  # Ex3: strictly more than half
        return "ex3", None
    if _RUN_OVER_20 in mask:  # Ex4: a run of 21 or more
        return "ex4", None
    if protocol(first_payload) is not None:  # Ex5
        return "ex5", None
    first_unprintable = mask.find(0)
    return None, (n, bits / n, n if first_unprintable < 0 else first_unprintable,
                  printable / n, _longest_run(mask), None)


@dataclass(frozen=True)
class FetFeatures:
    """The quantities Algorithm 1 looks at, kept as evidence for a censor event.

    Ratios are plain ``count / length`` floats. Python's division is correctly
    rounded, so comparing them with 3.4, 4.6 or 0.5 agrees with
    :func:`exemption`'s integer arithmetic (for any realistic packet length, a
    ratio that is not exactly on a threshold is at least 1/(5·length) away).
    """

    length: int
    popcount_per_byte: float
    leading_printable: int
    printable_fraction: float
    longest_printable_run: int
    protocol: Protocol | None

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict (ints, floats, a string or None) with the field names as keys.
        Shallow, unlike dataclasses.asdict: the censor logs one per detection."""
        return {name: getattr(self, name) for name in _FEATURE_NAMES}


_FEATURE_NAMES = tuple(f.name for f in fields(FetFeatures))  # fields() is slow per call
_EVIDENCE_KEYS = ("rule", *_FEATURE_NAMES)


def features(payload: bytes) -> FetFeatures:
    """Measure `payload` the way Algorithm 1 does. ValueError on empty bytes, as in
    :func:`exemption`: the ratios are undefined without data."""
    n = len(payload)
    if n == 0:
        raise ValueError("the FET features are defined for a data-carrying packet; got no bytes")
    mask = payload.translate(_PRINTABLE_MASK)
    first_unprintable = mask.find(0)
    return FetFeatures(
        length=n,
        popcount_per_byte=_popcount(payload) / n,
        leading_printable=n if first_unprintable < 0 else first_unprintable,
        printable_fraction=_popcount(mask) / n,
        longest_printable_run=_longest_run(mask),
        protocol=protocol(payload),
    )
