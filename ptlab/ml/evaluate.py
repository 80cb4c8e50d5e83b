"""``ptlab evaluate``: TPR/FPR per transport, ROC, portability and base rates.

For each transport in the dataset the task is "that transport against the
benign flows" (as in Wang et al., one binary classifier per transport). The
flows are split per (label, link setting) into training and held-out parts
by a seeded shuffle, so a seed reproduces the split, and with the learners'
own seeds, every metric, exactly. Three detectors are scored on the held-out
part, each through the censor's exported model (the code that runs live):

* ``entropy-length`` - Wang et al.'s first-message test (nothing to train);
* ``tree`` and ``gbdt`` - trained on the training part.

Flows shorter than a model's window count as not flagged, because the live
censor abstains on them. Portability: a model trained on one link setting
is tested on another setting's held-out flows and compared with its score
on its own setting's; the difference is the drop Wang et al. warn about.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from censor_sim.detectors.ml.model import Model, entropy_length_model

from . import metrics
from .dataset import Dataset
from .train import LEARNERS, train

BENIGN = "benign"
ROC_POINTS = 200  # at most this many points per curve in the JSON


@dataclass
class EvalOptions:
    seed: int = 1
    test_size: float = 0.3
    prevalence: float = 1e-6
    train_setting: str | None = None
    test_setting: str | None = None
    save_models: Path | None = None
    learners: tuple[str, ...] = LEARNERS


def split(ds: Dataset, seed: int, test_size: float) -> tuple[list[int], list[int]]:
    """Stratified by (label, setting): a seeded shuffle of each group, the first
    `test_size` of it held out. Indices come back sorted."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, m in enumerate(ds.meta):
        groups.setdefault((m["label"], m["setting"]), []).append(i)
    rng = random.Random(seed)
    train_idx: list[int] = []
    test_idx: list[int] = []
    for key in sorted(groups):
        idx = groups[key][:]
        rng.shuffle(idx)
        k = round(len(idx) * test_size)
        test_idx += idx[:k]
        train_idx += idx[k:]
    return sorted(train_idx), sorted(test_idx)


def _score(model: Model, ds: Dataset, idx: list[int], positive: str) -> dict[str, Any]:
    decisions = [model.decide_vector(ds.X[i]) for i in idx]
    flags = [d.flagged for d in decisions]
    pos = [ds.meta[i]["label"] == positive for i in idx]
    r = metrics.rates(flags, pos)
    points = metrics.roc([d.score for d in decisions], pos)
    out: dict[str, Any] = {"model": model.name, "kind": model.kind, **r.to_json(),
                           "auc": round(metrics.auc(points), 6),
                           "abstained": sum(bool(d.evidence.get("abstained"))
                                            for d in decisions),
                           "roc": _thin(points),
                           "decided": _decided(decisions, pos)}
    steps = [d.comparisons for d in decisions if d.comparisons]
    if steps:
        out["comparisons"] = {"mean": round(statistics.fmean(steps), 2), "max": max(steps)}
    by_app: dict[str, list[int]] = {}
    for i, d in zip(idx, decisions, strict=True):
        if ds.meta[i]["label"] == BENIGN:
            c = by_app.setdefault(ds.meta[i]["app"], [0, 0])
            c[0] += d.flagged
            c[1] += 1
    out["fpr_by_app"] = {a: {"flagged": k, "flows": n, "fpr": round(k / n, 6)}
                         for a, (k, n) in sorted(by_app.items())}
    return out


def _decided(decisions: list[Any], pos: list[bool]) -> dict[str, Any]:
    """The rates over the flows the model decided, leaving out those it abstained
    on (shorter than its window). The TPR and AUC above count an abstention as a
    miss, as the live censor lets such a flow through; so they mix what the model
    tells apart with how many flows of the mix end before its window, which is
    the workload's (a transport session with one small request is over in 25
    packets). These are the model's own."""
    kept = [k for k, d in enumerate(decisions) if not d.evidence.get("abstained")]
    flags, kpos = [decisions[k].flagged for k in kept], [pos[k] for k in kept]
    points = metrics.roc([decisions[k].score for k in kept], kpos)
    return {"flows": len(kept), **metrics.rates(flags, kpos).to_json(),
            "auc": round(metrics.auc(points), 6)}


def _thin(points: list[tuple[float, float, float]]) -> list[list[float]]:
    step = max(1, len(points) // ROC_POINTS)
    kept = points[::step] + ([points[-1]] if (len(points) - 1) % step else [])
    return [[round(f, 6), round(t, 6)] for f, t, _ in kept]


def _models(ds: Dataset, opts: EvalOptions, train_idx: list[int], positive: str, window: int,
            provenance: dict[str, Any], skipped: list[str]) -> list[Model]:
    """The entropy test, and each learner trained on `train_idx` (a learner that
    cannot train, for want of one class, is noted in `skipped`)."""
    models: list[Model] = [entropy_length_model(window)]
    labels = ds.labels
    for kind in opts.learners:
        try:
            models.append(train(kind, [ds.X[i] for i in train_idx],
                                [labels[i] == positive for i in train_idx], seed=opts.seed,
                                window=window, positive=positive, provenance=provenance))
        except ValueError as exc:
            skipped.append(str(exc))
    return models


def evaluate(ds: Dataset, opts: EvalOptions) -> dict[str, Any]:
    """Every metric of the evaluation as one JSON-ready dict (deterministic per seed)."""
    window = int(ds.manifest["window"])
    settings = sorted(set(ds.settings))
    for s in (opts.train_setting, opts.test_setting):
        if s is not None and s not in settings:
            raise ValueError(f"no link setting {s!r} in the dataset (has: {', '.join(settings)})")
    train_idx, test_idx = split(ds, opts.seed, opts.test_size)
    labels = ds.labels
    positives = sorted(set(labels) - {BENIGN})
    if BENIGN not in labels or not positives:
        raise ValueError("the dataset needs benign flows and at least one transport")
    prov = {"dataset": ds.manifest.get("name"), "dataset_sha256": ds.manifest["csv_sha256"],
            "split_seed": opts.seed, "test_size": opts.test_size}
    result: dict[str, Any] = {
        "dataset": {"name": ds.manifest.get("name"), "flows": len(labels),
                    "sha256": ds.manifest["csv_sha256"], "window": window,
                    "settings": ds.manifest.get("settings"),
                    "counts": ds.manifest.get("counts")},
        "options": {"seed": opts.seed, "test_size": opts.test_size,
                    "prevalence": opts.prevalence},
        "split": {"train": len(train_idx), "test": len(test_idx)},
        "tasks": [], "portability": []}
    for positive in positives:
        task = {positive, BENIGN}
        tr = [i for i in train_idx if labels[i] in task]
        te = [i for i in test_idx if labels[i] in task]
        entry: dict[str, Any] = {"positive": positive, "train": len(tr), "test": len(te),
                                 "models": []}
        skipped: list[str] = []
        models = _models(ds, opts, tr, positive, window, {**prov, "settings": settings},
                         skipped)
        if skipped:
            entry["skipped"] = skipped
        for model in models:
            scored = _score(model, ds, te, positive)
            hi = scored["fpr_ci95"][1]
            scored["base_rate"] = {
                "at_fpr": metrics.base_rate(scored["tpr"], scored["fpr"], opts.prevalence),
                "at_fpr_upper95": metrics.base_rate(scored["tpr"], hi, opts.prevalence)}
            entry["models"].append(scored)
            if opts.save_models and model.kind != "entropy-length":
                model.provenance["held_out"] = {k: scored[k] for k in
                                                ("tpr", "fpr", "tpr_ci95", "fpr_ci95", "auc")}
                model.save(opts.save_models / f"{model.name}.json")
        result["tasks"].append(entry)
        result["portability"] += _portability(ds, opts, positive, window, train_idx, test_idx,
                                              settings, prov)
    return result


def _portability(ds: Dataset, opts: EvalOptions, positive: str, window: int,
                 train_idx: list[int], test_idx: list[int], settings: list[str],
                 prov: dict[str, Any]) -> list[dict[str, Any]]:
    if len(settings) < 2:
        return []
    labels, where = ds.labels, ds.settings
    task = {positive, BENIGN}
    pairs = [(a, b) for a in settings for b in settings if a != b]
    if opts.train_setting:
        pairs = [(a, b) for a, b in pairs if a == opts.train_setting]
    if opts.test_setting:
        pairs = [(a, b) for a, b in pairs if b == opts.test_setting]
    out = []
    for a, b in pairs:
        tr = [i for i in train_idx if labels[i] in task and where[i] == a]
        same = [i for i in test_idx if labels[i] in task and where[i] == a]
        cross = [i for i in test_idx if labels[i] in task and where[i] == b]
        models = _models(ds, opts, tr, positive, window, {**prov, "settings": [a]}, [])
        for model in models:
            s, c = _score(model, ds, same, positive), _score(model, ds, cross, positive)
            out.append({"positive": positive, "kind": model.kind, "train_setting": a,
                        "test_setting": b,
                        "same": {k: s[k] for k in ("tpr", "fpr", "tpr_ci95", "fpr_ci95", "auc")},
                        "cross": {k: c[k] for k in ("tpr", "fpr", "tpr_ci95", "fpr_ci95",
                                                    "auc")},
                        "tpr_drop": round(s["tpr"] - c["tpr"], 6),
                        "fpr_rise": round(c["fpr"] - s["fpr"], 6)})
    return out
