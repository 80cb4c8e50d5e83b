"""Classify a server from its probe results, the first layers of Frolov's trees.

Frolov et al. (NDSS 2020, §V-A) start every decision tree with "any data response
-> not a proxy", then look at close type and close time. Their defence analysis
(§6) calls a server *probe-indifferent* when every probe gets the same close type
within 500 ms; a FIN at one fixed, unusual time for every probe is the signature
of obfs4proxy >= 0.0.11 (close at accept + 30 s + a per-bridge delay in 0..59 s),
while never closing at all ("read forever") is the behaviour they recommend,
shared by 0.7 % of tap and 42 % of ZMap endpoints.

Labels from :func:`looks_like`:

* ``responds-with-data`` - some probe got bytes back: an ordinary server.
* ``closes-at-threshold`` - every probe connected, got no data and was closed by
  FIN at the same time (within ``tolerance_s``): obfs4proxy-like.
* ``silent-timeout`` - every probe connected, got no data and was still open at
  ``watch_s``: the ideal probe resistance (MTProto-like, unidentifiable).
* ``unreachable`` - no probe connected.
* ``mixed`` - anything else (thresholds, RSTs, partial failures); the per-proxy
  decision trees of the censor issue refine this.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from statistics import median
from typing import Any

from .observe import ProbeResult

# Frolov §6: "within 500 milliseconds of their other responses, to allow for jitter".
DEFAULT_TOLERANCE_S = 0.5


def fin_threshold(results: Sequence[ProbeResult],
                  tolerance_s: float = DEFAULT_TOLERANCE_S) -> float | None:
    """The common FIN time if every probe connected, got no data and was closed by FIN
    within ``tolerance_s`` of the others; else None. The median is reported so one
    late scheduler wake-up does not move it."""
    if not results or any(not r.connected or r.response_len or r.close != "FIN"
                          or r.close_after_s is None for r in results):
        return None
    times = [r.close_after_s for r in results if r.close_after_s is not None]
    if max(times) - min(times) > tolerance_s:
        return None
    return round(median(times), 3)


def looks_like(results: Sequence[ProbeResult],
               tolerance_s: float = DEFAULT_TOLERANCE_S) -> str:
    """One label for the endpoint (see the module docstring)."""
    if not results:
        raise ValueError("no probe results to classify")
    if any(r.response_len > 0 for r in results):
        return "responds-with-data"
    if not any(r.connected for r in results):
        return "unreachable"
    if fin_threshold(results, tolerance_s) is not None:
        return "closes-at-threshold"
    if all(r.connected and r.close == "TIMEOUT" for r in results):
        return "silent-timeout"
    return "mixed"


def summarize(results: Sequence[ProbeResult],
              tolerance_s: float = DEFAULT_TOLERANCE_S) -> dict[str, Any]:
    """A JSON-safe summary: counts by close type, which probes drew data, each probe's
    close, the distinct close times (Frolov bins them to whole seconds; we keep
    0.1 s), the common FIN time if there is one, and the label."""
    closes = Counter(r.close for r in results)
    return {
        "probes": len(results),
        "connected": sum(r.connected for r in results),
        "close_counts": dict(sorted(closes.items())),
        "any_data": any(r.response_len > 0 for r in results),
        "data_probes": [r.probe for r in results if r.response_len > 0],
        "per_probe": {r.probe: [r.close, r.close_after_s] for r in results},
        "distinct_close_s": sorted({round(r.close_after_s, 1) for r in results
                                    if r.close_after_s is not None}),
        "fin_threshold_s": fin_threshold(results, tolerance_s),
        "verdict": looks_like(results, tolerance_s) if results else None,
    }
