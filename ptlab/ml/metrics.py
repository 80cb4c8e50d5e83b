"""Detection metrics with honest uncertainty: rates, intervals, ROC, base rates.

A rate from a few hundred flows is an estimate; the report gives every TPR
and FPR with a Wilson 95 % interval, which stays inside [0, 1] and is still
informative at 0 or n successes (where the normal approximation collapses to
a zero-width interval). The base-rate arithmetic is Wang et al.'s §7 point:
at a realistic prevalence, even a small FPR means most flagged flows are
innocent, so it is reported with the FPR's upper bound too.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials ((0, 1) when n is 0)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At k = 0 (k = n) the bound is exactly 0 (1); rounding must not say otherwise.
    return (0.0 if k == 0 else max(0.0, centre - half), 1.0 if k == n else min(1.0, centre + half))


@dataclass
class Rates:
    tp: int
    fn: int
    fp: int
    tn: int

    @property
    def tpr(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def fpr(self) -> float:
        return self.fp / (self.fp + self.tn) if self.fp + self.tn else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "tpr": round(self.tpr, 6), "fpr": round(self.fpr, 6),
                "tpr_ci95": [round(v, 6) for v in wilson(self.tp, self.tp + self.fn)],
                "fpr_ci95": [round(v, 6) for v in wilson(self.fp, self.fp + self.tn)]}


def rates(flags: list[bool], positive: list[bool]) -> Rates:
    tp = sum(f and p for f, p in zip(flags, positive, strict=True))
    fp = sum(f and not p for f, p in zip(flags, positive, strict=True))
    npos = sum(positive)
    return Rates(tp, npos - tp, fp, len(positive) - npos - fp)


def roc(scores: list[float], positive: list[bool]) -> list[tuple[float, float, float]]:
    """(FPR, TPR, threshold) points, flagging score >= threshold, from the highest
    threshold down; ties move together, as a threshold cannot split them."""
    npos = sum(positive)
    nneg = len(positive) - npos
    pairs = sorted(zip(scores, positive, strict=True), key=lambda sp: -sp[0])
    pts = [(0.0, 0.0, math.inf)]
    tp = fp = 0
    i = 0
    while i < len(pairs):
        s = pairs[i][0]
        while i < len(pairs) and pairs[i][0] == s:
            tp += pairs[i][1]
            fp += not pairs[i][1]
            i += 1
        pts.append((fp / nneg if nneg else 0.0, tp / npos if npos else 0.0, s))
    return pts


def auc(points: list[tuple[float, float, float]]) -> float:
    """Area under the ROC curve (trapezoids between the points)."""
    return math.fsum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(points, points[1:],
                                                                        strict=False))


def base_rate(tpr: float, fpr: float, prevalence: float) -> dict[str, float]:
    """What a flag means when only `prevalence` of flows are the transport:
    precision (P(transport | flagged)) and innocent flows flagged per true one."""
    true_flags = tpr * prevalence
    false_flags = fpr * (1 - prevalence)
    flagged = true_flags + false_flags
    return {"prevalence": prevalence, "tpr": tpr, "fpr": fpr,
            "precision": true_flags / flagged if flagged else 0.0,
            "false_per_true": false_flags / true_flags if true_flags else math.inf}
