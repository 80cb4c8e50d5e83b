"""Decision trees and gradient-boosted ensembles as plain data, with their own evaluator.

A censor loads a model on every start and runs it per flow. Keeping the
trained trees as JSON arrays (the layout of scikit-learn's ``tree_``:
feature, threshold, left child, right child, leaf value per node) means the
censor needs neither scikit-learn nor pickle (which would run code from the
model file), and a reader can count the comparisons a decision takes, the
figure Wang et al. report ("6 to 13 integer comparisons").

scikit-learn compares ``float32(x[feature]) <= threshold``; :func:`as_float32`
rounds the same way, so these trees give scikit-learn's answers bit for bit
(``tests/censor_sim/detectors/ml/test_trees.py`` checks it).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Any

LEAF = -1


def as_float32(x: list[float]) -> list[float]:
    """Round each value to float32, as scikit-learn does to its input."""
    return list(array("f", [min(max(v, -3.0e38), 3.0e38) for v in x]))


@dataclass(frozen=True)
class Tree:
    """One binary tree. Node 0 is the root; ``left[i] == LEAF`` marks a leaf."""

    feature: list[int]
    threshold: list[float]
    left: list[int]
    right: list[int]
    value: list[float]

    def __post_init__(self) -> None:
        n = len(self.feature)
        if n == 0 or any(len(a) != n for a in (self.threshold, self.left, self.right,
                                                self.value)):
            raise ValueError("tree arrays must be non-empty and of equal length")
        for i in range(n):
            lo, hi = self.left[i], self.right[i]
            if (lo == LEAF) != (hi == LEAF):
                raise ValueError(f"node {i}: one child only")
            # Children come after their parent: no cycles, every walk ends.
            if lo != LEAF and not (i < lo < n and i < hi < n):
                raise ValueError(f"node {i}: child index out of order or range")

    def walk(self, x32: list[float]) -> tuple[float, int]:
        """(leaf value, comparisons made) for a float32-rounded vector."""
        i, steps = 0, 0
        while self.left[i] != LEAF:
            i = self.left[i] if x32[self.feature[i]] <= self.threshold[i] else self.right[i]
            steps += 1
        return self.value[i], steps

    @property
    def max_feature(self) -> int:
        return max((f for f, lo in zip(self.feature, self.left, strict=True) if lo != LEAF),
                   default=-1)

    def to_json(self) -> dict[str, Any]:
        return {"feature": self.feature, "threshold": self.threshold, "left": self.left,
                "right": self.right, "value": self.value}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Tree:
        try:
            return cls([int(v) for v in d["feature"]], [float(v) for v in d["threshold"]],
                       [int(v) for v in d["left"]], [int(v) for v in d["right"]],
                       [float(v) for v in d["value"]])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"bad tree: {exc!r}") from None


@dataclass(frozen=True)
class Ensemble:
    """A scorer: one decision tree (leaf = P(positive)) or a gradient-boosted sum
    (``init`` + ``learning_rate`` × Σ leaves, in log-odds, through the logistic)."""

    kind: str  # "tree" or "gbdt"
    trees: list[Tree]
    init: float = 0.0
    learning_rate: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ("tree", "gbdt"):
            raise ValueError(f"unknown ensemble kind {self.kind!r}")
        if not self.trees or (self.kind == "tree" and len(self.trees) != 1):
            raise ValueError(f"{self.kind}: wrong number of trees ({len(self.trees)})")

    def score(self, x: list[float]) -> tuple[float, int]:
        """(probability of the positive class, comparisons made)."""
        x32 = as_float32(x)
        if self.kind == "tree":
            return self.trees[0].walk(x32)
        raw, steps = self.init, 0
        for t in self.trees:
            v, s = t.walk(x32)
            raw += self.learning_rate * v
            steps += s
        return 1.0 / (1.0 + math.exp(-raw)) if raw > -700 else 0.0, steps

    @property
    def max_feature(self) -> int:
        return max(t.max_feature for t in self.trees)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "init": self.init, "learning_rate": self.learning_rate,
                "trees": [t.to_json() for t in self.trees]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Ensemble:
        if not isinstance(d, dict) or not isinstance(d.get("trees"), list):
            raise ValueError("bad ensemble: expected a table with a list of trees")
        return cls(str(d.get("kind")), [Tree.from_json(t) for t in d["trees"]],
                   float(d.get("init", 0.0)), float(d.get("learning_rate", 1.0)))


def from_sklearn(estimator: Any) -> Ensemble:
    """Convert a fitted binary ``DecisionTreeClassifier`` or ``GradientBoostingClassifier``
    (classes [0, 1], 1 = positive)."""
    name = type(estimator).__name__
    if name == "DecisionTreeClassifier":
        t = estimator.tree_
        values = [float(v[0][1] / v[0].sum()) if v[0].sum() else 0.0 for v in t.value]
        return Ensemble("tree", [_tree(t, values)])
    if name == "GradientBoostingClassifier":
        trees = []
        for est in estimator.estimators_[:, 0]:
            t = est.tree_
            trees.append(_tree(t, [float(v[0][0]) for v in t.value]))
        prior = float(estimator.init_.class_prior_[1])
        init = math.log(prior / (1.0 - prior))
        return Ensemble("gbdt", trees, init, float(estimator.learning_rate))
    raise ValueError(f"cannot export a {name}")


def _tree(t: Any, values: list[float]) -> Tree:
    left = [int(v) for v in t.children_left]
    return Tree([int(f) if lo != LEAF else -1 for f, lo in zip(t.feature, left, strict=True)],
                [float(v) for v in t.threshold], left,
                [int(v) for v in t.children_right], values)
