"""Training: scikit-learn learners, exported to the censor's own model format.

Wang et al. used decision trees (and tried naive Bayes and k-NN); the issue
asks for a decision tree and gradient boosting. Both are trained only on
flows that reached the model's window: the censor abstains on shorter flows,
so they are never classified, and learning from them would only teach "short
means benign". The fitted estimator is exported to plain trees
(:mod:`censor_sim.detectors.ml.trees`) and wrapped in a
:class:`~censor_sim.detectors.ml.model.Model` with its schema and provenance;
the evaluation then scores flows through that exported model, the same code
the censor runs, not through scikit-learn.
"""

from __future__ import annotations

from typing import Any

from censor_sim.detectors.ml.model import Model
from censor_sim.detectors.ml.trees import from_sklearn

LEARNERS = ("tree", "gbdt")


def make_learner(kind: str, seed: int) -> Any:
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.tree import DecisionTreeClassifier

    if kind == "tree":
        # Shallow, as the paper's trees were (6-13 comparisons per decision).
        return DecisionTreeClassifier(max_depth=8, min_samples_leaf=3, random_state=seed)
    if kind == "gbdt":
        return GradientBoostingClassifier(n_estimators=60, max_depth=3, learning_rate=0.2,
                                          random_state=seed)
    raise ValueError(f"unknown learner {kind!r} (known: {', '.join(LEARNERS)})")


def train(kind: str, X: list[list[float]], y: list[bool], *, seed: int, window: int,
          positive: str, provenance: dict[str, Any] | None = None) -> Model:
    """Fit `kind` on the rows that reached `window` packets; return the exported model."""
    import numpy as np
    import sklearn

    keep = [i for i, row in enumerate(X) if row[0] >= window]
    ys = [y[i] for i in keep]
    if not any(ys) or all(ys):
        raise ValueError(f"{positive}/{kind}: training needs flows of both classes that "
                         f"reach {window} packets (got {sum(ys)} positive of {len(ys)})")
    est = make_learner(kind, seed)
    est.fit(np.asarray([X[i] for i in keep], dtype=np.float64), np.asarray(ys, dtype=int))
    prov = {"learner": type(est).__name__, "params": _params(est),
            "sklearn": sklearn.__version__, "seed": seed, "train_flows": len(keep),
            "train_positive": sum(ys), **(provenance or {})}
    return Model(f"{positive}-{kind}", kind, positive, window, 0.5, from_sklearn(est),
                 provenance=prov)


def _params(est: Any) -> dict[str, Any]:
    return {k: v for k, v in est.get_params().items()
            if isinstance(v, int | float | str | bool) or v is None}
