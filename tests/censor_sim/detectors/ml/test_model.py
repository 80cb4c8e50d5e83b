"""Saved models: schema checks, abstention, the shipped models and the censor's budget."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.detectors.ml import features
from censor_sim.detectors.ml.flowlog import DOWN, UP, FlowLog
from censor_sim.detectors.ml.model import (
    Model,
    ModelError,
    entropy_length_model,
    load,
    models_dir,
)
from censor_sim.detectors.ml.trees import LEAF, Ensemble, Tree


def handshake(log: FlowLog) -> FlowLog:
    for d, ts in ((UP, 0.0), (DOWN, 0.001), (UP, 0.002)):
        log.add(d, ts, 0)
    return log


def test_entropy_model_decides_at_the_first_client_payload():
    m = entropy_length_model()
    log = handshake(FlowLog(30))
    assert m.decide(log) is None  # abstains: no client payload yet
    noise = random.Random(5).randbytes(1448)
    log.add(UP, 0.01, len(noise), noise)
    d = m.decide(log)
    assert d is not None and d.flagged and d.packets == 4
    # The same decision from the dataset row.
    assert m.decide_vector(features.extract(log)).flagged
    log2 = handshake(FlowLog(30))
    log2.add(UP, 0.01, 100, bytes(100))  # under 149 bytes: not tested, not flagged
    assert not m.decide(log2).flagged


def test_tree_model_abstains_until_its_window():
    # A one-split tree on len_3 (the first client payload's length).
    names = features.feature_names(5)
    t = Tree([names.index("len_3"), LEAF, LEAF], [500.0, 0, 0], [1, LEAF, LEAF],
             [2, LEAF, LEAF], [0.0, 0.0, 1.0])
    m = Model("t", "tree", "x", 5, 0.5, Ensemble("tree", [t]))
    log = handshake(FlowLog(5))
    log.add(UP, 0.01, 1000, b"")
    assert m.decide(log) is None
    log.add(DOWN, 0.02, 10, b"")
    d = m.decide(log)
    assert d.flagged and d.comparisons == 1
    assert not m.decide_vector(features.extract(handshake(FlowLog(5)), 5)).flagged


def test_save_and_load_round_trip(tmp_path):
    m = entropy_length_model()
    p = m.save(tmp_path / "m.json")
    again = load(str(p))
    assert again.to_json() == m.to_json()


def test_schema_mismatch_and_bad_files_are_refused(tmp_path):
    d = entropy_length_model().to_json()
    d["schema"]["names"] = d["schema"]["names"][:-1]
    (tmp_path / "a.json").write_text(json.dumps(d))
    with pytest.raises(ModelError, match="schema"):
        load(str(tmp_path / "a.json"))
    d["schema"]["version"] = 999
    (tmp_path / "b.json").write_text(json.dumps(d))
    with pytest.raises(ModelError, match="retrain"):
        load(str(tmp_path / "b.json"))
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot read"):
        load(str(tmp_path / "c.json"))
    with pytest.raises(ModelError, match="no model"):
        load("no-such-model")


def test_shipped_models_load_and_record_their_provenance():
    import json

    from censor_sim.detectors import tlsintls

    shipped = sorted(p.stem for p in models_dir().glob("*.json"))
    assert "wang2015-entropy-length" in shipped and "wang2015-meek-tree" in shipped
    for name in shipped:
        # Each shipped model loads with the loader of its format.
        fmt = json.loads((models_dir() / f"{name}.json").read_text()).get("format")
        m = tlsintls.load_model(name) if fmt == "ptlab-tlsintls/1" else load(name)
        assert m.name == name and m.provenance
    tree = load("wang2015-meek-tree")
    assert tree.kind == "tree" and tree.positive == "meek"
    assert len(tree.provenance["dataset_sha256"]) == 64
    assert tree.provenance["held_out"]["tpr"] > 0.8


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c,
                                                                       max_size=4)))
def test_arbitrary_json_is_refused_cleanly(doc):
    with pytest.raises(ModelError):
        Model.from_json(doc)
