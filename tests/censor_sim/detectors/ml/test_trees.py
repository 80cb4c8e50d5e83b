"""Exported trees give scikit-learn's answers, and refuse malformed input."""

from __future__ import annotations

import random

import pytest

from censor_sim.detectors.ml.trees import LEAF, Ensemble, Tree, from_sklearn


def data(n: int = 400, seed: int = 1):
    rng = random.Random(seed)
    X, y = [], []
    for _ in range(n):
        pos = rng.random() < 0.4
        X.append([rng.gauss(3.0 if pos else 0.0, 1.5), rng.uniform(0, 1000),
                  rng.choice([0.1, 0.2, 0.30000001]) + (pos * 0.5), rng.random()])
        y.append(int(pos))
    return X, y


@pytest.mark.parametrize("kind", ["tree", "gbdt"])
def test_exported_models_match_sklearn_exactly(kind):
    np = pytest.importorskip("numpy")
    pytest.importorskip("sklearn")
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.tree import DecisionTreeClassifier

    X, y = data()
    est = (DecisionTreeClassifier(max_depth=6, random_state=1) if kind == "tree"
           else GradientBoostingClassifier(n_estimators=30, max_depth=3, random_state=1))
    est.fit(np.asarray(X), np.asarray(y))
    ens = from_sklearn(est)
    test, _ = data(300, seed=2)
    want = est.predict_proba(np.asarray(test))[:, 1]
    got = [ens.score(x)[0] for x in test]
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-9
    assert Ensemble.from_json(ens.to_json()) == ens


def test_comparisons_are_the_path_length():
    t = Tree([0, LEAF, 1, LEAF, LEAF], [0.5, 0, 2.0, 0, 0], [1, LEAF, 3, LEAF, LEAF],
             [2, LEAF, 4, LEAF, LEAF], [0, 0.1, 0, 0.7, 0.9])
    e = Ensemble("tree", [t])
    assert e.score([0.0, 0.0]) == (0.1, 1)
    assert e.score([1.0, 1.0]) == (0.7, 2)
    assert e.score([1.0, 3.0]) == (0.9, 2)


@pytest.mark.parametrize("bad", [
    {"feature": [0], "threshold": [0.0], "left": [0], "right": [0], "value": [0.0]},  # cycle
    {"feature": [0, -1], "threshold": [0.0, 0.0], "left": [1, -1], "right": [-1, -1],
     "value": [0.0, 0.0]},  # one child
    {"feature": [], "threshold": [], "left": [], "right": [], "value": []},
    {"feature": [0]},
])
def test_malformed_trees_are_refused(bad):
    with pytest.raises(ValueError):
        Tree.from_json(bad)


def test_ensemble_kinds():
    leaf = Tree([-1], [0.0], [LEAF], [LEAF], [0.3])
    with pytest.raises(ValueError):
        Ensemble("forest", [leaf])
    with pytest.raises(ValueError):
        Ensemble("tree", [leaf, leaf])
    assert Ensemble("gbdt", [leaf, leaf], init=0.0, learning_rate=1.0).score([0.0])[0] \
        == pytest.approx(1 / (1 + 2.718281828459045 ** -0.6))
