"""TLS inside an encrypted tunnel, seen from packet sizes, directions and timing.

After Xue, Kallitsis, Houmansadr and Ensafi, "Fingerprinting Obfuscated Proxy
Traffic with Encapsulated TLS Handshakes", USENIX Security 2024 (docs/censors/tlsintls.md §1).

Why this exists: a proxy that wraps the user's connections in its own encryption
(Shadowsocks, VMess, Trojan, VLESS over TLS) still carries the user's TLS
handshakes, and their shape (a ClientHello-sized packet up, a large burst down, a
small burst up) survives encryption with a near-constant framing overhead. The
paper's censor needs no proxy traffic to train on: it learns what a plain TLS
handshake looks like and searches a flow's payload packets for one.

The representation (§6.2 of the paper):

* the first 25 data-carrying TCP packets of a flow (``W_o``), as signed sizes
  (positive client to server), after the cover protocol's own TLS handshake is
  removed;
* sizes shifted down by the tunnel's framing overhead, then mapped to four groups
  (1–160, 161–600, 601–1210, 1211 and up), signed; 3-grams of those;
* bursts: consecutive packets in one direction whose gap is under 3 RTTs (the RTT
  being the time from the SYN to the client's first ACK), summed.

The two tests (§6.3); a flow is flagged only if both hold:

* a chi-squared distance between the flow's 3-gram frequencies and each class's
  (plain TLS, and not TLS) over the model's chosen 3-grams; TLS-like when
  ``D(s, TLS) / (D(s, non-TLS) + eps) <= delta``;
* a Mahalanobis distance between windows of ``W_b`` consecutive bursts (5 for TLS
  1.2, 3 for TLS 1.3: 2 x round trips + 1) and the mean of plain TLS handshakes;
  TLS-like when the smallest over the flow is at most ``gamma``.

The numbers a model needs (class frequencies, the burst mean and inverse
covariance, ``delta``, ``gamma``, the overhead) are learned in the lab
(:mod:`ptlab.ml.tlsintls`) and shipped as JSON; this module only applies them, in
pure Python, so the censor needs no numpy. Nothing here raises on malformed input.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

WINDOW_PACKETS = 25  # W_o (§6.2): enough for over 99.95 % of TLS handshakes
GROUP_BOUNDS = (160, 600, 1210)  # L1..L4 upper bounds (§6.2)
NGRAM = 3
BURST_GAP_RTTS = 3.0
CCS_RECORD = b"\x14\x03\x03\x00\x01\x01"  # ChangeCipherSpec, as TLS 1.2 and 1.3 send it
EPS = 1e-9


@dataclass(frozen=True)
class Pkt:
    """One data-carrying packet: +1 client to server, -1 back; its payload size, the
    time since the flow's first packet, and its first bytes (for the cover's CCS)."""

    direction: int
    size: int
    time: float
    head: bytes = b""


HEAD_BYTES = 256  # bytes of each packet kept: a server CCS follows its ServerHello (~130 bytes in)


def handshake_rtt(packets: Iterable[tuple[int, int, float]]) -> float | None:
    """The paper's RTT from a flow's first packets as (direction, payload length, time):
    from the SYN (the first packet, client to server and empty) to the client's first
    empty packet after the server's first, its handshake ACK. None if not so."""
    syn: float | None = None
    seen_server = False
    for i, (direction, length, ts) in enumerate(packets):
        if i == 0:
            if direction != 1 or length != 0:
                return None
            syn = ts
        elif direction == -1:
            seen_server = True
        elif seen_server and length == 0:
            return rtt_estimate(syn, ts)
    return None


def from_flowlog(packets: Iterable[Any],
                 window: int = WINDOW_PACKETS) -> tuple[list[Pkt], float | None]:
    """The first ``window`` data packets of a flow log (``censor_sim.detectors.ml.flowlog``
    packet views: direction, ts, length, data) and the handshake RTT."""
    views = list(packets)
    data = [Pkt(p.direction, p.length, p.ts, bytes(p.data[:HEAD_BYTES]))
            for p in views if p.length > 0][:window]
    return data, handshake_rtt((p.direction, p.length, p.ts) for p in views)


def strip_cover_handshake(packets: Sequence[Pkt]) -> list[Pkt]:
    """The packets after the cover protocol's own TLS handshake, if it has one.

    The cover handshake ends, in each direction, with the packet that carries its
    ChangeCipherSpec record (TLS 1.3 sends one too, for middlebox compatibility);
    what follows both is the tunnel's payload. A flow whose first packet is not a
    TLS handshake record has no cover handshake and is returned whole. When a CCS
    is missing in a direction, the first three bursts (ClientHello, the server's
    flight, the client's Finished) are taken to be the handshake.
    """
    if not packets or packets[0].direction != 1 or not packets[0].head.startswith(b"\x16\x03"):
        return list(packets)
    last = {}
    for i, p in enumerate(packets):
        if p.direction not in last and CCS_RECORD in p.head:
            last[p.direction] = i
    if len(last) == 2:
        return list(packets[max(last.values()) + 1 :])
    flips, prev = 0, packets[0].direction
    for i, p in enumerate(packets):
        if p.direction != prev:
            flips, prev = flips + 1, p.direction
            if flips == 3:
                return list(packets[i:])
    return []


def group(size: int) -> int:
    """The size group 1..4 of a (positive) size (§6.2)."""
    for k, bound in enumerate(GROUP_BOUNDS, start=1):
        if size <= bound:
            return k
    return len(GROUP_BOUNDS) + 1


def shifted(size: int, overhead: int) -> int:
    """A tunnel packet's size less the framing overhead, never below 1."""
    return max(size - overhead, 1)


def ngrams(packets: Sequence[Pkt], overhead: int = 0, n: int = NGRAM) -> Counter[str]:
    """Counts of the signed size-group n-grams, as strings such as ``"2,-4,1"``."""
    seq = [p.direction * group(shifted(p.size, overhead)) for p in packets]
    return Counter(",".join(map(str, seq[i : i + n])) for i in range(len(seq) - n + 1))


def rtt_estimate(syn_time: float | None, first_ack_time: float | None) -> float | None:
    """The paper's RTT: from the SYN to the client's first ACK, as the monitor sees them."""
    if syn_time is None or first_ack_time is None or first_ack_time <= syn_time:
        return None
    return first_ack_time - syn_time


def bursts(packets: Sequence[Pkt], rtt: float | None, overhead: int = 0,
           gap_rtts: float = BURST_GAP_RTTS) -> list[int]:
    """Signed burst sizes: same-direction packets less than ``gap_rtts`` RTTs apart,
    summed (each less the overhead). Without an RTT, direction alone splits bursts."""
    out: list[int] = []
    prev: Pkt | None = None
    for p in packets:
        size = shifted(p.size, overhead)
        joined = (prev is not None and p.direction == prev.direction
                  and (rtt is None or p.time - prev.time < gap_rtts * rtt))
        if joined:
            out[-1] += p.direction * size
        else:
            out.append(p.direction * size)
        prev = p
    return out


def chi2_distance(flow: Counter[str], probs: dict[str, float], features: Iterable[str]) -> float:
    """Σ over the model's 3-grams of (Pr(flow, g) − Pr(class, g))² / Pr(class, g)."""
    total = sum(flow.values()) or 1
    d = 0.0
    for g in features:
        pc = max(probs.get(g, 0.0), EPS)
        d += (flow.get(g, 0) / total - pc) ** 2 / pc
    return d


def mahalanobis(x: Sequence[float], mean: Sequence[float],
                inv_cov: Sequence[Sequence[float]]) -> float:
    """sqrt((x − μ)ᵀ Σ⁻¹ (x − μ)), for the small windows here, in pure Python."""
    d = [a - b for a, b in zip(x, mean, strict=True)]
    q = sum(d[i] * sum(inv_cov[i][j] * d[j] for j in range(len(d))) for i in range(len(d)))
    return math.sqrt(max(q, 0.0))


def min_window_distance(seq: Sequence[int], mean: Sequence[float],
                        inv_cov: Sequence[Sequence[float]]) -> float | None:
    """The smallest Mahalanobis distance of any ``len(mean)`` consecutive bursts that
    start client to server (a handshake starts with the ClientHello); None if none."""
    wb = len(mean)
    best: float | None = None
    for i in range(len(seq) - wb + 1):
        if seq[i] <= 0:
            continue
        dist = mahalanobis(seq[i : i + wb], mean, inv_cov)
        best = dist if best is None else min(best, dist)
    return best


@dataclass
class Model:
    """A trained TLS-in-TLS model (see :mod:`ptlab.ml.tlsintls` for how it is made)."""

    features: list[str]
    p_tls: dict[str, float]
    p_other: dict[str, float]
    delta: float
    mean: list[float]
    inv_cov: list[list[float]]
    gamma: float
    overhead: int = 0
    window: int = WINDOW_PACKETS
    name: str = "tlsintls"
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"format": "ptlab-tlsintls/1", "name": self.name, "window": self.window,
                "overhead": self.overhead,
                "ngram": {"features": self.features, "p_tls": self.p_tls,
                          "p_other": self.p_other, "delta": self.delta},
                "bursts": {"mean": self.mean, "inv_cov": self.inv_cov, "gamma": self.gamma},
                "provenance": self.provenance}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Model:
        if d.get("format") != "ptlab-tlsintls/1":
            raise ValueError(f"not a TLS-in-TLS model (format {d.get('format')!r})")
        try:
            ng, bu = d["ngram"], d["bursts"]
            model = cls([str(g) for g in ng["features"]],
                        {str(k): float(v) for k, v in ng["p_tls"].items()},
                        {str(k): float(v) for k, v in ng["p_other"].items()},
                        float(ng["delta"]), [float(x) for x in bu["mean"]],
                        [[float(x) for x in row] for row in bu["inv_cov"]], float(bu["gamma"]),
                        int(d.get("overhead", 0)), int(d.get("window", WINDOW_PACKETS)),
                        str(d.get("name", "tlsintls")), dict(d.get("provenance", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad TLS-in-TLS model: {exc!r}") from None
        wb = len(model.mean)
        if wb < 2 or len(model.inv_cov) != wb or any(len(r) != wb for r in model.inv_cov):
            raise ValueError("bad TLS-in-TLS model: the burst mean and covariance disagree")
        return model


@dataclass(frozen=True)
class Decision:
    flagged: bool
    ratio: float
    distance: float | None
    packets: int
    bursts: int

    def to_json(self) -> dict[str, Any]:
        return {"flagged": self.flagged, "chi2_ratio": round(self.ratio, 4),
                "burst_distance": None if self.distance is None else round(self.distance, 4),
                "packets": self.packets, "bursts": self.bursts}


def decide(model: Model, packets: Sequence[Pkt], rtt: float | None,
           strip_cover: bool = True) -> Decision:
    """Both of the paper's tests over a flow's first ``model.window`` data packets."""
    window = list(packets[: model.window])
    inner = strip_cover_handshake(window) if strip_cover else window
    grams = ngrams(inner, model.overhead)
    d_tls = chi2_distance(grams, model.p_tls, model.features)
    d_other = chi2_distance(grams, model.p_other, model.features)
    ratio = d_tls / (d_other + EPS)
    seq = bursts(inner, rtt, model.overhead)
    dist = min_window_distance(seq, model.mean, model.inv_cov)
    flagged = bool(grams) and ratio <= model.delta and dist is not None and dist <= model.gamma
    return Decision(flagged, ratio, dist, len(inner), len(seq))


def load_model(name: str) -> Model:
    """A shipped model by name (``censor_sim/models/NAME.json``) or a model file by path;
    ValueError names what is wrong."""
    import json
    from pathlib import Path

    from .ml.model import models_dir

    p = Path(name)
    if p.suffix != ".json" or not p.exists():
        p = models_dir() / f"{name}.json"
    if not p.exists():
        raise ValueError(f"no TLS-in-TLS model {name!r}")
    try:
        return Model.from_json(json.loads(p.read_text()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p.name}: cannot read: {exc}") from None
