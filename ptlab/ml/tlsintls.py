"""Train and test the TLS-in-TLS detector on a lab dataset (docs/censors/tlsintls.md §2).

As in Xue et al. (USENIX Security 2024, §6.3), the model is learned from plain
traffic only: the benign mix's HTTPS flows are the TLS class, its HTTP, SSH,
DNS-over-TCP and binary flows the other class. No proxy flow is used to fit it;
proxy flows (a dataset's transports, with ``inner = "https"``) only measure it.

* 3-grams: each class's pooled frequencies; the ``top`` grams by how far apart
  the classes are (|p_tls − p_other| / sqrt(p_tls + p_other), our reading of the
  paper's "distinguishability": large between classes, relative to their size).
* Bursts: the mean and covariance of the first ``wb`` bursts of the TLS flows
  (3 for TLS 1.3, which the lab speaks), refitted once without the flows beyond
  the 99th percentile of distance. The lab has one TLS client and two servers, so
  its handshakes vary far less than an ISP's, and the covariance would call a
  ClientHello 50 bytes off a stranger. ``min_std`` (150 bytes) floors each
  burst's spread to stand in for real variety (ClientHellos alone span 200–550
  bytes, §4 of the paper); this floor is ours (docs/censors/tlsintls.md §2.1).
* Thresholds: δ and γ from the paper's grids (0.1–1.0 by 0.05; 1–5 by 0.25), the
  loosest pair whose false-positive rate on the training half of the benign flows
  is at most ``fpr_target``; the other half measures it.

The flows are kept as compact sequences (``sequences.jsonl.gz``: per flow its
label, app, setting, RTT and data packets, with two flags per packet instead of
its bytes), so a model can be retrained and checked without the pcaps.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from censor_sim.detectors import tlsintls as ti
from censor_sim.pcapflows import flows_from_pcap

from ..common.stats import wilson
from .dataset import APPS_BY_PORT, load_dataset

TLS_APPS = {"https", "https-edge"}
OTHER_APPS = {"http", "ssh", "dns", "binary"}
DELTAS = tuple(round(0.1 + 0.05 * i, 2) for i in range(19))  # 0.1 .. 1.0
GAMMAS = tuple(1 + 0.25 * i for i in range(17))  # 1 .. 5
OVERHEAD = 40  # the middle of the paper's 20-60 bytes (§6.2); one value for every tunnel
MIN_STD = 150.0  # bytes: the least spread of a handshake burst (see the module docstring)
LOG_PACKETS = 160  # packets read per flow from a pcap: 25 data packets and their ACKs


@dataclass
class FlowSequence:
    """One flow as the detector sees it."""

    label: str  # "benign" or the transport
    app: str
    setting: str
    rtt: float | None
    pkts: list[ti.Pkt]

    @property
    def tls(self) -> bool:
        return self.label == "benign" and self.app in TLS_APPS

    @property
    def other(self) -> bool:
        return self.label == "benign" and self.app in OTHER_APPS

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "app": self.app, "setting": self.setting,
                "rtt": self.rtt,
                "pkts": [[p.direction, p.size, round(p.time, 6), _flags(p.head)]
                         for p in self.pkts]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FlowSequence:
        return cls(d["label"], d["app"], d["setting"], d["rtt"],
                   [ti.Pkt(int(a), int(b), float(c), _head(str(f))) for a, b, c, f in d["pkts"]])


def _flags(head: bytes) -> str:
    """What the detector reads from a packet's bytes: a TLS handshake record at its
    start (h) and a ChangeCipherSpec record in it (c)."""
    return ("h" if head.startswith(b"\x16\x03") else "") + ("c" if ti.CCS_RECORD in head else "")


def _head(flags: str) -> bytes:
    return (b"\x16\x03" if "h" in flags else b"") + (ti.CCS_RECORD if "c" in flags else b"")


def sequences_from_dataset(path: Path) -> list[FlowSequence]:
    """Every flow of a dataset's pcaps, labelled by its cell (``ptlab dataset``)."""
    ds = load_dataset(Path(path))
    by_pcap: dict[str, dict[str, Any]] = {}
    for r in ds.meta:
        by_pcap.setdefault(r["pcap"], {"label": r["label"], "setting": r["setting"],
                                       "clients": set()})["clients"].add(r["client"])
    out: list[FlowSequence] = []
    for pcap, info in sorted(by_pcap.items()):
        for flow in flows_from_pcap(ds.path / pcap, sorted(info["clients"]), LOG_PACKETS):
            pkts, rtt = ti.from_flowlog(flow.log.packets)
            if len(pkts) < ti.WINDOW_PACKETS:
                continue  # the paper drops flows shorter than W_o (§6.2)
            app = (info["label"] if info["label"] != "benign" else
                   APPS_BY_PORT.get(flow.server_port, f"tcp/{flow.server_port}"))
            out.append(FlowSequence(info["label"], app, info["setting"], rtt, pkts))
    return out


def write_sequences(path: Path, seqs: list[FlowSequence]) -> None:
    with gzip.open(path, "wt") as fh:
        for s in seqs:
            fh.write(json.dumps(s.to_json(), separators=(",", ":")) + "\n")


def read_sequences(path: Path) -> list[FlowSequence]:
    with gzip.open(path, "rt") as fh:
        return [FlowSequence.from_json(json.loads(line)) for line in fh if line.strip()]


def split(seqs: list[FlowSequence], seed: int) -> tuple[list[FlowSequence], list[FlowSequence]]:
    """Benign flows in two halves (train, test), each app split evenly; the proxy
    flows all go to the test side."""
    rng = random.Random(seed)
    train, test = [], []
    groups: dict[str, list[FlowSequence]] = defaultdict(list)
    for s in seqs:
        if s.label == "benign":
            groups[s.app].append(s)
        else:
            test.append(s)
    for app in sorted(groups):
        g = groups[app][:]
        rng.shuffle(g)
        half = len(g) // 2
        train += g[:half]
        test += g[half:]
    return train, test


def _probs(counts: Counter[str]) -> dict[str, float]:
    total = sum(counts.values()) or 1
    return {g: c / total for g, c in counts.items()}


def fit(train: list[FlowSequence], overhead: int = OVERHEAD, wb: int = 3, top: int = 100,
        fpr_target: float = 0.01, min_std: float = MIN_STD) -> ti.Model:
    """A model from plain flows only (see the module docstring)."""
    import numpy as np

    tls = [s for s in train if s.tls]
    other = [s for s in train if s.other]
    if len(tls) < wb + 2 or not other:
        raise ValueError(f"need plain TLS and other benign flows to train on "
                         f"(have {len(tls)} TLS, {len(other)} other)")
    # The TLS class is each handshake as it is on the wire (no tunnel, no overhead).
    c_tls: Counter[str] = Counter()
    c_other: Counter[str] = Counter()
    for s in tls:
        c_tls.update(ti.ngrams(s.pkts, 0))
    for s in other:
        c_other.update(ti.ngrams(s.pkts, 0))
    p_tls, p_other = _probs(c_tls), _probs(c_other)
    grams = set(p_tls) | set(p_other)

    def score(g: str) -> float:
        a, b = p_tls.get(g, 0.0), p_other.get(g, 0.0)
        return abs(a - b) / (a + b) ** 0.5

    features = sorted(grams, key=lambda g: (-score(g), g))[:top]
    vectors = np.array([v[:wb] for v in (ti.bursts(s.pkts, s.rtt, 0) for s in tls)
                        if len(v) >= wb and v[0] > 0], dtype=float)
    if len(vectors) < wb + 2:
        raise ValueError(f"too few TLS handshakes with {wb} bursts ({len(vectors)})")

    def moments(x):
        mean = x.mean(axis=0)
        cov = np.atleast_2d(np.cov(x, rowvar=False))
        floor = np.maximum(np.diag(cov), min_std**2) - np.diag(cov)
        return mean, np.linalg.inv(cov + np.diag(floor))

    mean, inv = moments(vectors)
    d = np.sqrt(np.einsum("ij,jk,ik->i", vectors - mean, inv, vectors - mean))
    keep = vectors[d <= np.percentile(d, 99)]
    if len(keep) >= wb + 2:
        mean, inv = moments(keep)
    model = ti.Model(features, {g: p_tls.get(g, 0.0) for g in features},
                     {g: p_other.get(g, 0.0) for g in features}, DELTAS[0],
                     [float(x) for x in mean], [[float(x) for x in r] for r in inv],
                     GAMMAS[0], overhead,
                     provenance={"train_flows": len(train), "tls_flows": len(tls),
                                 "other_flows": len(other), "wb": wb,
                                 "fpr_target": fpr_target, "min_std": min_std})
    benign = [s for s in train if s.label == "benign"]
    decisions = [(_ratio_dist(model, s)) for s in benign]
    best = (DELTAS[0], GAMMAS[0])
    for delta in DELTAS:
        for gamma in GAMMAS:
            fp = sum(1 for r, dist in decisions
                     if r <= delta and dist is not None and dist <= gamma)
            if fp <= fpr_target * len(benign) and (delta, gamma) > best:
                best = (delta, gamma)
    model.delta, model.gamma = best
    model.provenance["train_false_positives"] = sum(
        1 for r, dist in decisions if r <= best[0] and dist is not None and dist <= best[1])
    return model


def _ratio_dist(model: ti.Model, s: FlowSequence) -> tuple[float, float | None]:
    d = ti.decide(model, s.pkts, s.rtt)
    return d.ratio, d.distance


def evaluate(model: ti.Model, test: list[FlowSequence]) -> dict[str, Any]:
    """False positives on the held-out benign flows (by app), detections per transport,
    each as k/n with a Wilson 95 % interval."""
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_setting: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s in test:
        key = f"benign:{s.app}" if s.label == "benign" else s.label
        flagged = ti.decide(model, s.pkts, s.rtt).flagged
        for table, k in ((rows, key), (by_setting, f"{key}@{s.setting}")):
            table[k][0] += flagged
            table[k][1] += 1
    benign = [sum(v[i] for k, v in rows.items() if k.startswith("benign:")) for i in (0, 1)]

    def cell(k: int, n: int) -> dict[str, Any]:
        lo, hi = wilson(k, n) if n else (0.0, 1.0)
        return {"flagged": k, "flows": n, "rate": k / n if n else None,
                "wilson95": [round(lo, 6), round(hi, 6)]}

    return {"fpr": cell(*benign), "by_class": {k: cell(*v) for k, v in sorted(rows.items())},
            "by_setting": {k: cell(*v) for k, v in sorted(by_setting.items())},
            "delta": model.delta, "gamma": model.gamma, "overhead": model.overhead}
