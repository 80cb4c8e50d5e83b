"""The feature vector a learning censor reads from a flow's first N packets.

Wang et al. 2015's classifiers (their ``feature_extraction.py``) look at the
first 30 packets of a flow in three groups, each for upstream, downstream and
both directions together:

* **sizes** - the share of packets without payload, the most frequent
  payload lengths, and how many packets start a TLS application-data record
  (``17 03 03``) - meek's HTTP bodies ride in those;
* **entropy** - min, max, mean and median of each payload's byte entropy;
* **timing** - inter-arrival times.

This module computes those groups, plus the raw per-packet sequence
(direction, length, inter-arrival time of packet i) that lets a decision
tree make the "6 to 13 integer comparisons" the paper reports, and the first
payloads' statistics including the entropy test's p-value
(:mod:`.entropy_test`). Unlike the paper it keeps the TCP handshake in the
window (the censor counts packets from the SYN; see ``datapath``).

The vector is a list of floats in the order of :func:`feature_names`; a saved
model records those names and :data:`SCHEMA_VERSION`, and loading refuses a
model whose schema differs, so a model can never read the wrong column.
"""

from __future__ import annotations

import statistics
from collections import Counter

import numpy as np

from ..stats import popcount_mean, printable_fraction
from . import entropy_test
from .flowlog import DOWN, UP, FlowLog, PacketView

SCHEMA_VERSION = 1
DEFAULT_WINDOW = 30
TOP_LENGTHS = 3
IAT_EDGES_MS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
TLS_APP_DATA = b"\x17\x03\x03"
_SCOPES = (("up", UP), ("down", DOWN), ("all", 0))
_SCOPE_FEATURES = ("pkts", "bytes", "zero_frac", "len_mean", "len_max",
                   *(f"top{i + 1}" for i in range(TOP_LENGTHS)), "tls_app_frac",
                   "ent_min", "ent_max", "ent_mean", "ent_median",
                   "iat_mean", "iat_median", "iat_max")
_FIRST = ("first_up_len", "first_up_entropy", "first_up_printable", "first_up_popcount",
          "first_up_ks_p", "first_down_len", "first_down_entropy")


def feature_names(window: int = DEFAULT_WINDOW) -> list[str]:
    """Column names, in vector order, for a `window`-packet model."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    names = ["window_packets"]
    for i in range(window):
        names += [f"dir_{i}", f"len_{i}", f"iat_{i}"]
    for scope, _ in _SCOPES:
        names += [f"{scope}_{f}" for f in _SCOPE_FEATURES]
    names += [f"iat_hist_{i}" for i in range(len(IAT_EDGES_MS) + 1)]
    names += list(_FIRST)
    return names


def payload_entropy(data: bytes) -> float:
    """Shannon entropy of a payload's bytes (bits per byte), vectorised: the censor
    computes it for up to 30 payloads per decision. It agrees with
    :func:`~censor_sim.detectors.stats.shannon_entropy` to about 1e-15, and both the
    dataset and the live censor use this one, so they agree exactly."""
    if not data:
        return 0.0
    counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
    p = counts[counts > 0] / len(data)
    h = float(-(p * np.log2(p)).sum())
    return h if h > 0.0 else 0.0


def extract(log: FlowLog, window: int = DEFAULT_WINDOW) -> list[float]:
    """The feature vector over the first `window` packets of `log` (zeros past its end)."""
    pkts = log.packets[:window]
    ent = {id(p): payload_entropy(p.data) for p in pkts if p.length > 0 and p.data}
    out: list[float] = [float(len(pkts))]
    prev = pkts[0].ts if pkts else 0.0
    for i in range(window):
        if i < len(pkts):
            p = pkts[i]
            out += [float(p.direction), float(p.length), (p.ts - prev) * 1000.0]
            prev = p.ts
        else:
            out += [0.0, 0.0, 0.0]
    for _, direction in _SCOPES:
        out += _scope(pkts if direction == 0 else [p for p in pkts if p.direction == direction],
                      ent)
    out += _iat_histogram(pkts)
    out += _first(log, window, ent)
    return out


def extract_named(log: FlowLog, window: int = DEFAULT_WINDOW) -> dict[str, float]:
    """:func:`extract` as a name → value mapping (for evidence and datasets)."""
    return dict(zip(feature_names(window), extract(log, window), strict=True))


def _scope(pkts: list[PacketView], ent: dict[int, float]) -> list[float]:
    n = len(pkts)
    lengths = [p.length for p in pkts]
    payload = [p for p in pkts if p.length > 0]
    common = sorted(Counter(p.length for p in payload).items(), key=lambda kv: (-kv[1], kv[0]))
    tops = [float(length) for length, _ in common[:TOP_LENGTHS]]
    tops += [0.0] * (TOP_LENGTHS - len(tops))
    ents = [ent[id(p)] for p in payload if p.data]
    iats = [(b.ts - a.ts) * 1000.0 for a, b in zip(pkts, pkts[1:], strict=False)]
    return [
        float(n), float(sum(lengths)),
        (n - len(payload)) / n if n else 0.0,
        sum(lengths) / n if n else 0.0,
        float(max(lengths, default=0)),
        *tops,
        sum(p.data.startswith(TLS_APP_DATA) for p in payload) / len(payload) if payload else 0.0,
        min(ents, default=0.0), max(ents, default=0.0),
        sum(ents) / len(ents) if ents else 0.0,
        statistics.median(ents) if ents else 0.0,
        sum(iats) / len(iats) if iats else 0.0,
        statistics.median(iats) if iats else 0.0,
        max(iats, default=0.0),
    ]


def _iat_histogram(pkts: list[PacketView]) -> list[float]:
    bins = [0] * (len(IAT_EDGES_MS) + 1)
    iats = [(b.ts - a.ts) * 1000.0 for a, b in zip(pkts, pkts[1:], strict=False)]
    for v in iats:
        k = 0
        while k < len(IAT_EDGES_MS) and v >= IAT_EDGES_MS[k]:
            k += 1
        bins[k] += 1
    return [b / len(iats) if iats else 0.0 for b in bins]


def _first(log: FlowLog, window: int, ent: dict[int, float]) -> list[float]:
    up = _first_in(log, UP, window)
    down = _first_in(log, DOWN, window)
    out = [0.0] * len(_FIRST)
    if up is not None:
        verdict = entropy_test.test_message(up.data)
        out[0:5] = [float(up.length), ent.get(id(up), 0.0), printable_fraction(up.data),
                    popcount_mean(up.data), verdict.p_value if verdict.tested else 0.0]
    if down is not None:
        out[5:7] = [float(down.length), ent.get(id(down), 0.0)]
    return out


def _first_in(log: FlowLog, direction: int, window: int) -> PacketView | None:
    for p in log.packets[:window]:
        if p.direction == direction and p.length > 0:
            return p
    return None
