"""A saved learning-censor model: what it detects, what it reads, how it was made.

A model file is JSON (``format: ptlab-ml-model/1``) holding

* ``kind`` - ``entropy-length`` (Wang et al.'s first-message test, no
  training), ``tree`` or ``gbdt`` (trained, :mod:`.trees`);
* ``positive`` - the transport it flags, and ``window``, the packets it needs;
* ``schema`` - feature names and :data:`features.SCHEMA_VERSION`; loading
  refuses a model whose names differ from this code's, so a model can never
  read the wrong column;
* ``threshold`` - the score at or above which a flow is flagged;
* ``provenance`` - dataset (with its SHA-256), seed, split, settings,
  library versions and the held-out metrics, so a result can be traced back.

:meth:`Model.decide` is the censor's per-flow call: ``None`` means "abstain,
not enough packets yet"; otherwise a :class:`Decision`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from . import entropy_test, features
from .flowlog import UP, FlowLog
from .trees import Ensemble

FORMAT = "ptlab-ml-model/1"
KINDS = ("entropy-length", "tree", "gbdt")


class ModelError(ValueError):
    """A model file that cannot be used, with the reason."""


@dataclass(frozen=True)
class Decision:
    flagged: bool
    score: float
    packets: int  # packets seen when deciding
    comparisons: int = 0  # tree comparisons made (0 for the entropy test)
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class Model:
    name: str
    kind: str
    positive: str
    window: int = features.DEFAULT_WINDOW
    threshold: float = 0.5
    ensemble: Ensemble | None = None
    params: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ModelError(f"model {self.name}: unknown kind {self.kind!r} "
                             f"(known: {', '.join(KINDS)})")
        if not 1 <= self.window <= 1000:
            raise ModelError(f"model {self.name}: window must be in 1..1000")
        expected = features.feature_names(self.window)
        if not self.names:
            self.names = expected
        if self.names != expected:
            raise ModelError(f"model {self.name}: its feature schema differs from this "
                             f"version's (schema {features.SCHEMA_VERSION}); retrain it")
        if self.kind == "entropy-length":
            self.params = {"min_length": entropy_test.MIN_LENGTH,
                           "bytes_used": entropy_test.BYTES_USED, "block": entropy_test.BLOCK,
                           **self.params}
        elif self.ensemble is None or self.ensemble.kind != self.kind:
            raise ModelError(f"model {self.name}: a {self.kind} model needs its trees")
        elif self.ensemble.max_feature >= len(self.names):
            raise ModelError(f"model {self.name}: a tree reads a feature past the schema")

    # --- deciding -----------------------------------------------------------

    def decide(self, log: FlowLog) -> Decision | None:
        """The censor's call on a flow so far; None = abstain until more packets."""
        if self.kind == "entropy-length":
            first = log.first_payload(UP)
            if first is None or log.packets.index(first) >= self.window:
                return None if len(log) < self.window else self._entropy(None, len(log))
            return self._entropy(first.data, log.packets.index(first) + 1)
        if len(log) < self.window:
            return None
        return self.decide_vector(features.extract(log, self.window))

    def decide_vector(self, x: list[float]) -> Decision:
        """Decide from a feature vector (a dataset row). A flow that ended before the
        model had its packets is not flagged: the live censor would have abstained."""
        n = int(x[0])
        if self.kind == "entropy-length":
            length, p = x[self.names.index("first_up_len")], x[self.names.index("first_up_ks_p")]
            tested = length >= self.params["min_length"]
            flagged = tested and p >= self.threshold
            return Decision(flagged, p if tested else 0.0, n,
                            evidence={"length": int(length), "p_value": round(p, 6)})
        if n < self.window:
            return Decision(False, 0.0, n, evidence={"abstained": True})
        assert self.ensemble is not None
        score, steps = self.ensemble.score(x)
        return Decision(score >= self.threshold, score, n, steps)

    def _entropy(self, data: bytes | None, packets: int) -> Decision:
        if data is None:
            return Decision(False, 0.0, packets, evidence={"first_up_payload": None})
        v = entropy_test.test_message(data, min_length=self.params["min_length"],
                                      bytes_used=self.params["bytes_used"],
                                      block=self.params["block"], p_threshold=self.threshold)
        return Decision(v.random_looking, v.p_value if v.tested else 0.0, packets,
                        evidence=v.to_json())

    @property
    def packets_needed(self) -> int:
        """The most packets a decision can need: the censor's budget must cover it."""
        return self.window

    # --- files --------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "name": self.name, "kind": self.kind,
                "positive": self.positive, "window": self.window,
                "threshold": self.threshold, "params": self.params,
                "schema": {"version": features.SCHEMA_VERSION, "names": self.names},
                "ensemble": self.ensemble.to_json() if self.ensemble else None,
                "provenance": self.provenance}

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return path

    @classmethod
    def from_json(cls, d: Any, where: str = "model") -> Model:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ModelError(f"{where}: not a {FORMAT} file")
        schema = d.get("schema") or {}
        if schema.get("version") != features.SCHEMA_VERSION:
            raise ModelError(f"{where}: feature schema {schema.get('version')!r}, this code "
                             f"reads {features.SCHEMA_VERSION}; retrain the model")
        try:
            ens = Ensemble.from_json(d["ensemble"]) if d.get("ensemble") else None
            return cls(str(d["name"]), str(d["kind"]), str(d["positive"]), int(d["window"]),
                       float(d["threshold"]), ens, dict(d.get("params") or {}),
                       dict(d.get("provenance") or {}), list(schema.get("names") or []))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ModelError):
                raise
            raise ModelError(f"{where}: {exc}") from None


def models_dir() -> Path:
    """Models shipped with the censor (``censor_sim/models``)."""
    return Path(str(resources.files("censor_sim.models")))


def load(name: str) -> Model:
    """Load a shipped model by name, or a model file by path."""
    p = Path(name)
    if p.suffix != ".json" or not p.exists():
        p = models_dir() / f"{name}.json"
    if not p.exists():
        known = ", ".join(sorted(q.stem for q in models_dir().glob("*.json"))) or "none"
        raise ModelError(f"no model {name!r} (shipped: {known})")
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{p.name}: cannot read: {exc}") from None
    return Model.from_json(data, p.name)


def entropy_length_model(window: int = features.DEFAULT_WINDOW) -> Model:
    """Wang et al.'s first-message test as a model (nothing to train)."""
    return Model("wang2015-entropy-length", "entropy-length", "obfs4", window,
                 entropy_test.P_THRESHOLD,
                 provenance={"source": "Wang et al., CCS 2015; liangw89/obfs-detection "
                                       "entropy.py (block 8, 2048 bytes, >= 149 bytes, "
                                       "KS p >= 0.1)"})
